/**
 * sandfleet: run untrusted code on a sandfleet fleet, over its HTTP API.
 *
 * No dependencies: Node 18 or newer (built-in fetch), or any runtime with
 * fetch.
 *
 *     import { Sandbox } from "sandfleet";
 *     const sb = new Sandbox({ url: "http://127.0.0.1:8080", token: "sft_..." });
 *     const r = await sb.run("print(6*7)");
 *     console.log(r.stdout, r.status, r.exit_code);
 *
 * The seed's class works unchanged, with the fleet in place of a local
 * Docker engine (SANDFLEET_URL and SANDFLEET_TOKEN say where and who):
 *
 *     import { DockerSandbox } from "sandfleet";
 *     const sandbox = new DockerSandbox();
 *     const { success, output, exitCode } = await sandbox.execute("print('hi')");
 *
 * API errors reject with SandfleetError, whose `code` is the server's
 * stable code. Requests are retried with backoff on 429 and 503
 * (honouring Retry-After) and when the gateway cannot be reached; a job
 * gets its ID before the first attempt, so a retried submit runs it once.
 */
export const VERSION = "0.1.0";
/** Where `worker --embedded` (make run) serves the API. */
export const DEFAULT_URL = "http://127.0.0.1:8080";
const LONG_POLL_S = 30; // seconds the server is asked to hold each wait
/** An error answer of the API, or a failure to reach it. */
export class SandfleetError extends Error {
    /** The server's stable code, "unreachable" without an answer, "timeout" when the caller's wait ran out. */
    code;
    /** HTTP status; 0 without an answer. */
    status;
    /** Seconds the server asked to wait (429, 503). */
    retryAfter;
    constructor(message, code, status = 0, retryAfter) {
        super(code ? `${code}: ${message}` : message);
        this.name = "SandfleetError";
        this.code = code;
        this.status = status;
        this.retryAfter = retryAfter;
    }
}
function env(name) {
    const p = globalThis.process;
    return p?.env?.[name] || undefined;
}
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
/** A UUIDv7 (time-ordered, 74 random bits), as the fleet makes them. */
export async function newId() {
    const b = new Uint8Array(16);
    await randomBytes(b);
    let ms = Date.now();
    for (let i = 5; i >= 0; i--) {
        b[i] = ms & 0xff;
        ms = Math.floor(ms / 256);
    }
    b[6] = (b[6] & 0x0f) | 0x70;
    b[8] = (b[8] & 0x3f) | 0x80;
    const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
async function randomBytes(b) {
    const c = globalThis.crypto;
    if (c?.getRandomValues) {
        c.getRandomValues(b);
        return;
    }
    const spec = "node:crypto"; // Node 18 has Web Crypto only as a module
    const m = await import(spec);
    m.webcrypto.getRandomValues(b);
}
function secs(ms) {
    return String(Math.max(0, Math.round(ms)) / 1000);
}
function decode(s, encoding) {
    if (encoding !== "base64")
        return s;
    const bin = atob(s);
    return new TextDecoder().decode(Uint8Array.from(bin, (ch) => ch.charCodeAt(0)));
}
/** stdout then stderr, as text. */
export function outputOf(r) {
    return decode(r.stdout, r.stdout_encoding) + decode(r.stderr, r.stderr_encoding);
}
/** A client of a sandfleet gateway. */
export class Sandbox {
    url;
    token;
    timeoutMs;
    retries;
    backoffMs;
    image;
    queue;
    constructor(options = {}) {
        this.url = (options.url ?? env("SANDFLEET_URL") ?? DEFAULT_URL).replace(/\/+$/, "");
        this.token = options.token ?? env("SANDFLEET_TOKEN");
        this.timeoutMs = options.timeoutMs ?? 30000;
        this.retries = options.retries ?? 5;
        this.backoffMs = options.backoffMs ?? 250;
        this.image = options.image ?? "python";
        this.queue = options.queue;
    }
    /** The Job JSON run and submit send: defaults filled, an ID given. */
    async job(code, options = {}) {
        const job = { image: this.image, ...options, id: options.id ?? (await newId()) };
        if (code !== undefined)
            job.code = code;
        if (job.queue === undefined && this.queue !== undefined)
            job.queue = this.queue;
        return job;
    }
    /** Run a job and return its result, whatever its status. */
    async run(code, options = {}) {
        const { timeoutMs, ...rest } = options;
        const job = await this.job(code, rest);
        const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
        const wait = Math.min(LONG_POLL_S * 1000, timeoutMs ?? Infinity);
        const { status, body } = await this.request("POST", "/v1/jobs", { query: { wait: secs(wait) }, body: job, waitMs: wait });
        if (status === 200)
            return body;
        return this.wait(body.id, deadline === undefined ? undefined : deadline - Date.now());
    }
    /** Queue a job and return its ID at once. */
    async submit(code, options = {}) {
        const { body } = await this.request("POST", "/v1/jobs", { body: await this.job(code, options) });
        return body.id;
    }
    /** The job's result, or null while it is queued or running. */
    async get(id) {
        const { status, body } = await this.request("GET", `/v1/jobs/${encodeURIComponent(id)}`);
        return status === 200 ? body : null;
    }
    /** Wait for the job's result, in long polls of up to 30 s. */
    async wait(id, timeoutMs) {
        const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
        for (;;) {
            const left = deadline === undefined ? LONG_POLL_S * 1000 : deadline - Date.now();
            if (left <= 0)
                throw new SandfleetError(`job ${id}: no result within ${timeoutMs} ms`, "timeout");
            const wait = Math.min(LONG_POLL_S * 1000, left);
            const { status, body } = await this.request("GET", `/v1/jobs/${encodeURIComponent(id)}`, {
                query: { wait: secs(wait) },
                waitMs: wait,
            });
            if (status === 200)
                return body;
        }
    }
    /** Cancel a job: its canceled result, or null when the cancel is recorded and no worker has carried it out yet. */
    async cancel(id) {
        const { status, body } = await this.request("POST", `/v1/jobs/${encodeURIComponent(id)}/cancel`, { waitMs: 5000 });
        return status === 200 ? body : null;
    }
    /**
     * Run a job and yield its output as it comes; the generator returns the
     * result. A gateway without live output (501) yields the whole output
     * once the job has finished.
     */
    async *stream(code, options = {}) {
        const { timeoutMs, ...rest } = options;
        const id = await this.submit(code, rest);
        const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
        // The stream has no timeout of its own (a job may be silent for long):
        // the caller's aborts it, body and all.
        const ctl = new AbortController();
        const timer = timeoutMs === undefined ? undefined : setTimeout(() => ctl.abort(), timeoutMs);
        const timedOut = () => new SandfleetError(`job ${id}: no result within ${timeoutMs} ms`, "timeout");
        let result;
        try {
            let resp;
            try {
                resp = await this.open("GET", `/v1/jobs/${encodeURIComponent(id)}/events`, { waitMs: null, signal: ctl.signal });
            }
            catch (e) {
                if (ctl.signal.aborted)
                    throw timedOut();
                if (!(e instanceof SandfleetError) || e.code !== "not_implemented")
                    throw e;
                const r = await this.wait(id, timeoutMs);
                if (r.stdout)
                    yield { stream: "stdout", text: decode(r.stdout, r.stdout_encoding) };
                if (r.stderr)
                    yield { stream: "stderr", text: decode(r.stderr, r.stderr_encoding) };
                return r;
            }
            try {
                for await (const [event, data] of sse(resp)) {
                    if (event === "stdout" || event === "stderr")
                        yield { stream: event, text: String(data.text ?? "") };
                    else if (event === "finished" && data.result)
                        result = data.result;
                }
            }
            catch (e) {
                if (ctl.signal.aborted)
                    throw timedOut();
                throw e;
            }
        }
        finally {
            if (timer !== undefined)
                clearTimeout(timer);
            // A caller that breaks out of the loop closes the stream: the
            // gateway's watch of the job and its stream slot end with it.
            ctl.abort();
        }
        return result ?? this.wait(id, deadline === undefined ? undefined : Math.max(deadline - Date.now(), 1));
    }
    /**
     * Run jobs as one batch and yield each line's outcome in the order they
     * finish; the generator returns the summary. The same jobs under the
     * same name reuse the results already stored.
     */
    async *batch(jobs, options = {}) {
        let body = "";
        for (const j of jobs)
            body += JSON.stringify(j) + "\n";
        const query = {
            name: options.name,
            window: options.window?.toString(),
            queue: options.queue,
            strict: options.strict ? "true" : undefined,
        };
        const resp = await this.open("POST", "/v1/batches", { query, raw: body, contentType: "application/x-ndjson", waitMs: null });
        let summary;
        for await (const line of lines(resp)) {
            if (!line.trim())
                continue;
            const ev = JSON.parse(line);
            if (ev.summary)
                summary = ev.summary;
            else if (ev.result)
                yield { line: ev.line, result: ev.result, reused: !!ev.reused };
            else if (ev.line)
                yield { line: ev.line, error: new SandfleetError(ev.error.message, ev.error.code, 400) };
            else
                throw new SandfleetError(ev.error.message, ev.error.code);
        }
        return summary;
    }
    /** What a finished job kept of its outputs, and what it skipped; a job without a result yet throws (code not_finished). */
    async artifacts(id) {
        const { status, body } = await this.request("GET", `/v1/jobs/${encodeURIComponent(id)}/artifacts`);
        if (status !== 200)
            throw new SandfleetError(`job ${id} has not finished`, "not_finished", status);
        return body;
    }
    /** One artifact's bytes (its name as listed, e.g. "results/plot.png"). */
    async artifact(id, name) {
        const path = name.split("/").map(encodeURIComponent).join("/");
        return this.download(`/v1/jobs/${encodeURIComponent(id)}/artifacts/${path}`);
    }
    /** A workspace's head: revision, size_bytes, files, job, kept. */
    async workspace(name) {
        return (await this.request("GET", `/v1/workspaces/${encodeURIComponent(name)}`)).body;
    }
    /** A workspace's snapshot (its head, or a revision it keeps): the bytes of a tar archive. */
    async snapshot(name, revision) {
        return this.download(`/v1/workspaces/${encodeURIComponent(name)}/snapshot`, { revision: revision?.toString() });
    }
    async download(path, query) {
        const resp = await this.open("GET", path, { query, waitMs: 0 });
        if (resp.status !== 200)
            throw new SandfleetError(`${path}: the job has not finished`, "not_finished", resp.status);
        const want = resp.headers.get("Content-Length");
        let data;
        try {
            data = new Uint8Array(await resp.arrayBuffer());
        }
        catch (e) {
            // The gateway cuts a download whose bytes fail their digest.
            throw new SandfleetError(`${path}: cut short of ${want ?? "its"} bytes (${String(e)})`, "short_download");
        }
        if (want !== null && data.length !== Number(want)) {
            throw new SandfleetError(`${path}: ${data.length} of ${want} bytes arrived`, "short_download");
        }
        const digest = resp.headers.get("X-Sandfleet-Sha256");
        if (digest && (await sha256Hex(data)) !== digest.toLowerCase()) {
            throw new SandfleetError(`${path}: the bytes that arrived fail their sha256 ${digest}`, "digest_mismatch");
        }
        return data;
    }
    /** The fleet's workers and queues. */
    async status() {
        return (await this.request("GET", "/v1/status")).body;
    }
    // Sessions ---------------------------------------------------------------
    /** Start a session: a sandbox kept across calls (POST /v1/sessions). End it with close(), or `await using`. */
    async createSession(spec = {}) {
        const { idleTimeoutMs, maxLifetimeMs, ...rest } = spec;
        const body = { image: this.image, ...rest };
        if (idleTimeoutMs !== undefined)
            body.idle_timeout = secs(idleTimeoutMs) + "s";
        if (maxLifetimeMs !== undefined)
            body.max_lifetime = secs(maxLifetimeMs) + "s";
        const { body: info } = await this.request("POST", "/v1/sessions", { body, headers: { "Idempotency-Key": await newId() }, waitMs: 120000 });
        return new Session(this, info);
    }
    /** A session made earlier, by its ID. */
    async session(id) {
        const { body } = await this.request("GET", `/v1/sessions/${encodeURIComponent(id)}`);
        return new Session(this, body);
    }
    /** This token's sessions' records, running first. */
    async sessions() {
        return (await this.request("GET", "/v1/sessions")).body.sessions;
    }
    // Tools, for a model's function calls --------------------------------------
    /** The tools as a model's definitions (GET /v1/tools): "openai" (Chat Completions' {type: "function", ...}), "anthropic" ({name, description, input_schema}) or "mcp". */
    async tools(format = "openai") {
        const { body } = await this.request("GET", "/v1/tools", { query: { format } });
        return body.tools;
    }
    /**
     * Run one tool call as /mcp's tools/call would (POST /v1/tools/NAME). `call` is a tool's name (then `args` an
     * object, or a JSON string as OpenAI gives it), or a model's call as its API hands it over: OpenAI's tool call
     * ({id, type: "function", function: {name, arguments}}) or Anthropic's tool_use block ({type: "tool_use", id, name,
     * input}). A failing program is a result with isError, never a throw; toMessage() is the reply to hand the model
     * back, in the shape of the call.
     */
    async callTool(call, args) {
        let name, shape = "", id = "";
        if (typeof call === "string")
            name = call;
        else
            [name, args, shape, id] = toolCallOf(call);
        let input = args ?? {};
        if (typeof args === "string") {
            try {
                input = args.trim() ? JSON.parse(args) : {};
            }
            catch (e) {
                // A model's arguments that are not JSON are its mistake to correct, told as the server tells a schema's refusal.
                const text = `validating "arguments": not JSON (${e.message}): ${args}`;
                return new ToolResult({ isError: true, content: [{ type: "text", text: text.length > 1000 ? text.slice(0, 1000) + "..." : text }] }, shape, id);
            }
        }
        const timeout = input !== null && typeof input === "object" ? Math.max(0, Number(input.timeout ?? 0) || 0) : 0;
        const { body } = await this.request("POST", `/v1/tools/${encodeURIComponent(name)}`, { body: input, waitMs: (timeout + 60) * 1000 });
        return new ToolResult(body, shape, id);
    }
    /** @internal A JSON call; what the session objects use. */
    async request(method, path, opts = {}) {
        const raw = opts.body === undefined ? undefined : JSON.stringify(opts.body);
        const resp = await this.open(method, path, { query: opts.query, raw, contentType: "application/json", waitMs: opts.waitMs ?? 0, headers: opts.headers });
        const text = await resp.text();
        return { status: resp.status, body: text ? JSON.parse(text) : undefined };
    }
    /** @internal fetch with the token, a timeout, and retries; non-2xx answers throw. waitMs null: no timeout (streams). */
    async open(method, path, opts) {
        let url = this.url + path;
        const q = new URLSearchParams();
        for (const [k, v] of Object.entries(opts.query ?? {}))
            if (v !== undefined)
                q.set(k, v);
        if ([...q].length)
            url += "?" + q.toString();
        const headers = { Accept: "application/json", "User-Agent": `sandfleet-typescript/${VERSION}` };
        if (opts.raw !== undefined)
            headers["Content-Type"] = opts.contentType ?? "application/json";
        if (this.token)
            headers.Authorization = `Bearer ${this.token}`;
        Object.assign(headers, opts.headers);
        for (let attempt = 0;; attempt++) {
            let err;
            const ctl = new AbortController();
            const timer = opts.waitMs === null ? undefined : setTimeout(() => ctl.abort(), this.timeoutMs + opts.waitMs);
            try {
                if (opts.signal?.aborted)
                    ctl.abort();
                opts.signal?.addEventListener("abort", () => ctl.abort(), { once: true });
                const resp = await fetch(url, { method, headers, body: opts.raw, signal: ctl.signal });
                if (resp.ok)
                    return resp;
                err = await apiError(resp);
                if ((err.status !== 429 && err.status !== 503) || attempt >= this.retries)
                    throw err;
            }
            catch (e) {
                if (e instanceof SandfleetError || opts.signal?.aborted)
                    throw e;
                err = new SandfleetError(`cannot reach ${this.url}: ${e.message}`, "unreachable");
                if (attempt >= this.retries)
                    throw err;
            }
            finally {
                if (timer !== undefined)
                    clearTimeout(timer);
            }
            const delay = this.backoffMs * 2 ** attempt * (0.5 + Math.random() / 2);
            await sleep(Math.max(delay, (err.retryAfter ?? 0) * 1000));
        }
    }
}
async function apiError(resp) {
    const ra = Number(resp.headers.get("Retry-After"));
    const retryAfter = Number.isFinite(ra) && ra > 0 ? ra : undefined;
    try {
        const { error } = (await resp.json());
        return new SandfleetError(error.message, error.code, resp.status, retryAfter);
    }
    catch {
        return new SandfleetError(resp.statusText || "HTTP error", `http_${resp.status}`, resp.status, retryAfter);
    }
}
async function* lines(resp) {
    if (!resp.body)
        return;
    const reader = resp.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    try {
        for (;;) {
            const { done, value } = await reader.read();
            if (done)
                break;
            buf += dec.decode(value, { stream: true });
            let i;
            while ((i = buf.indexOf("\n")) >= 0) {
                yield buf.slice(0, i);
                buf = buf.slice(i + 1);
            }
        }
    }
    finally {
        reader.cancel().catch(() => { }); // the reader left early: close the body
    }
    buf += dec.decode();
    if (buf)
        yield buf;
}
async function* sse(resp) {
    let event = "message";
    let data = [];
    for await (const raw of lines(resp)) {
        const line = raw.replace(/\r$/, "");
        if (line === "") {
            if (data.length)
                yield [event, JSON.parse(data.join("\n"))];
            event = "message";
            data = [];
        }
        else if (line.startsWith("event:"))
            event = line.slice(6).trim();
        else if (line.startsWith("data:"))
            data.push(line.slice(5).trimStart());
    }
}
/** The longest a call waits for a command or cell that names no timeout (the worker's cap bounds it). */
const CALL_WAIT_MS = 600000;
function filePath(p) {
    return p.split("/").map(encodeURIComponent).join("/");
}
/** A sandbox kept across calls. Made by Sandbox.createSession; `await using` (or close) ends it. */
export class Session {
    sandbox;
    id;
    info;
    files;
    processes;
    ports;
    /** @internal */
    path;
    constructor(sandbox, info) {
        this.sandbox = sandbox;
        this.id = info.id;
        this.info = info;
        this.path = `/v1/sessions/${encodeURIComponent(info.id)}`;
        this.files = new Files(this);
        this.processes = new Processes(this);
        this.ports = new Ports(this);
    }
    /** Where `port` of the session is reached through the gateway (once exposed: ports.expose), with this client's token. */
    getUrl(port) {
        return `${this.sandbox.url}${this.path}/ports/${Math.trunc(port)}/`;
    }
    /** @internal A call on the session: a mutating one with an Idempotency-Key, so that a retry runs once. */
    async call(method, rel, body, opts = {}) {
        const headers = method === "GET" ? undefined : { "Idempotency-Key": await newId() };
        return (await this.sandbox.request(method, this.path + rel, { body, headers, ...opts })).body;
    }
    /** Run a command: a string goes to /bin/sh -c, an array is an argv. */
    async exec(cmd, opts = {}) {
        const body = typeof cmd === "string" ? { shell: cmd } : { cmd };
        if (opts.cwd !== undefined)
            body.cwd = opts.cwd;
        if (opts.env !== undefined)
            body.env = opts.env;
        if (opts.stdin !== undefined)
            body.stdin = opts.stdin;
        if (opts.timeoutMs !== undefined)
            body.timeout = secs(opts.timeoutMs) + "s";
        if (opts.background)
            body.background = true;
        if (opts.exclusive)
            body.exclusive = true;
        const d = await this.call("POST", "/exec", body, { waitMs: opts.timeoutMs ?? CALL_WAIT_MS });
        return {
            exitCode: d.exit_code,
            signal: d.signal ?? 0,
            timedOut: Boolean(d.timed_out),
            stdout: decode(d.stdout ?? "", d.stdout_encoding),
            stderr: decode(d.stderr ?? "", d.stderr_encoding),
            truncated: Boolean(d.stdout_truncated || d.stderr_truncated),
            durationMs: d.duration_ms ?? 0,
            pid: d.pid,
            exclusive: Boolean(d.exclusive),
            ended: d.ended ?? 0,
            raw: d,
        };
    }
    /**
     * Run a cell in a stateful context of `language`: "python" (the default),
     * "javascript", "typescript" or "bash". The context defaults to "default"
     * for python and to the language's name for the others.
     */
    async runCode(code, opts = {}) {
        const body = { code };
        if (opts.language)
            body.language = opts.language;
        if (opts.context)
            body.context = opts.context;
        if (opts.timeoutMs !== undefined)
            body.timeout = secs(opts.timeoutMs) + "s";
        const d = await this.call("POST", "/code", body, { waitMs: opts.timeoutMs ?? CALL_WAIT_MS });
        return {
            text: d.text,
            stdout: decode(d.stdout ?? "", d.stdout_encoding),
            stderr: decode(d.stderr ?? "", d.stderr_encoding),
            error: d.error,
            reset: Boolean(d.reset),
            timedOut: Boolean(d.timed_out),
            language: d.language ?? "python",
            exitCode: d.exit_code,
            raw: d,
        };
    }
    /** Its code contexts, by name. */
    async contexts() {
        return (await this.call("GET", "/contexts")).contexts;
    }
    /**
     * Start a code context in `cwd` (default the session's directory):
     * `runCode(..., { context: name })` runs in it. A name taken already
     * rejects with SandfleetError "exists"; past 16 contexts,
     * "too_many_requests". Without a name it takes its language's default
     * name when free.
     */
    async createContext(opts = {}) {
        const body = { language: opts.language ?? "python" };
        if (opts.name)
            body.name = opts.name;
        if (opts.cwd)
            body.cwd = opts.cwd;
        return (await this.call("POST", "/contexts", body));
    }
    /** End a code context: its process is killed and its name is free. */
    async deleteContext(name) {
        await this.call("DELETE", `/contexts/${encodeURIComponent(name)}`);
    }
    /**
     * Its recent code cells, oldest first, as its worker keeps them (the last
     * 20; an ended session's for 15 minutes). A read: the idle timeout goes
     * on, and a paused session is not resumed (`gone`).
     */
    async cells() {
        return (await this.call("GET", "/cells"));
    }
    /** Count as a call: the idle timeout starts again. */
    async keepalive() {
        this.info = (await this.call("POST", "/keepalive"));
        return this.info;
    }
    /**
     * Replace the running session's egress policy, within the worker's caps:
     * a limits.network value (`{allow: [...]}`, or `"none"` to lock it after
     * the installs). The proxy applies it at once.
     */
    async setNetwork(network) {
        this.info = (await this.call("PUT", "/network", network));
        return this.info;
    }
    /** The session's record as it is now. */
    async refresh() {
        this.info = (await this.call("GET", ""));
        return this.info;
    }
    /** End the session; ending one that has ended already is no error. */
    async close() {
        try {
            this.info = (await this.call("DELETE", ""));
        }
        catch (e) {
            if (!(e instanceof SandfleetError) || (e.code !== "gone" && e.code !== "not_found"))
                throw e;
        }
    }
}
// `await using s = await sb.createSession()`: where the runtime has
// Symbol.asyncDispose (Node 20.4+), a session is async-disposable.
const asyncDispose = Symbol.asyncDispose;
if (asyncDispose) {
    Object.defineProperty(Session.prototype, asyncDispose, {
        value: function () {
            return this.close();
        },
    });
}
/** A session's files: paths are relative to /workspace, or under /tmp. */
export class Files {
    s;
    constructor(s) {
        this.s = s;
    }
    async read(path) {
        const resp = await this.s.sandbox.open("GET", `${this.s.path}/files/${filePath(path)}`, { waitMs: 0 });
        return new Uint8Array(await resp.arrayBuffer());
    }
    async readText(path) {
        return new TextDecoder().decode(await this.read(path));
    }
    async write(path, data, opts = {}) {
        const raw = typeof data === "string" ? new TextEncoder().encode(data) : data;
        const resp = await this.s.sandbox.open("PUT", `${this.s.path}/files/${filePath(path)}`, {
            query: { mode: opts.mode?.toString(8) },
            raw,
            contentType: "application/octet-stream",
            headers: { "Idempotency-Key": await newId() },
            waitMs: 0,
        });
        return (await resp.json());
    }
    async list(dir = ".") {
        return (await this.s.call("GET", "/files", undefined, { query: { dir } })).entries;
    }
    async remove(path, opts = {}) {
        await this.s.call("DELETE", `/files/${filePath(path)}`, undefined, { query: { recursive: opts.recursive ? "true" : undefined } });
    }
}
/** A session's exposed ports: a server it runs on the sandbox's 127.0.0.1, reached through the gateway at Session.getUrl(port). */
export class Ports {
    s;
    constructor(s) {
        this.s = s;
    }
    /**
     * Expose `port` (1024 to 65535). The answer's token is a preview token
     * good for this port alone until expires_at (ttlMs, default an hour),
     * which a request may carry instead of the owner's token
     * (X-Sandfleet-Preview-Token, or ?sandfleet_preview=). With waitMs the
     * call first waits that long at most for the server to accept a
     * connection (SandfleetError "timeout" if it does not).
     */
    async expose(port, opts = {}) {
        const body = { port };
        if (opts.ttlMs)
            body.ttl = secs(opts.ttlMs) + "s";
        if (opts.waitMs)
            body.wait = secs(opts.waitMs) + "s";
        return (await this.s.call("POST", "/ports", body, { waitMs: opts.waitMs ?? 0 }));
    }
    /** The ports exposed. */
    async list() {
        return (await this.s.call("GET", "/ports")).ports;
    }
    /** Stop exposing `port`: its URL and preview tokens answer 404, and the connections open to it are closed. */
    async unexpose(port) {
        await this.s.call("DELETE", `/ports/${Math.trunc(port)}`);
    }
}
/** A session's background processes (started with exec(..., { background: true })). */
export class Processes {
    s;
    constructor(s) {
        this.s = s;
    }
    async list() {
        return (await this.s.call("GET", "/processes")).processes;
    }
    /** Its output from offset since; with waitMs, after waiting that long at most for it to end. */
    async output(pid, opts = {}) {
        const query = { since: String(opts.since ?? 0), wait: opts.waitMs ? secs(opts.waitMs) + "s" : undefined };
        const d = await this.s.call("GET", `/processes/${pid}`, undefined, { query, waitMs: opts.waitMs ?? 0 });
        return { ...d, output: decode(d.output ?? "", d.output_encoding) };
    }
    async signal(pid, signal = 15) {
        await this.s.call("POST", `/processes/${pid}/signal`, { signal });
    }
    async stdin(pid, data, opts = {}) {
        const raw = typeof data === "string" ? new TextEncoder().encode(data) : data;
        await this.s.sandbox.open("POST", `${this.s.path}/processes/${pid}/stdin`, {
            query: { eof: opts.eof ? "true" : undefined },
            raw,
            contentType: "application/octet-stream",
            headers: { "Idempotency-Key": await newId() },
            waitMs: 0,
        });
    }
}
const SEED_IMAGE = "agent-sandbox:latest"; // the seed's image runs python -c: the python preset
const EXIT_BY_STATUS = { timeout: 124, oom: 137, canceled: 130, output_limit: 1, failed: 1, compile_error: 65 };
/**
 * The seed's DockerSandbox, running on the fleet instead of a local Docker
 * engine, with the seed's limits (512 MiB, 1 CPU, no network, read-only
 * root with a 64 MiB /tmp). execute never rejects: a failure to reach the
 * fleet is { success: false, output: "Sandbox error: ...", exitCode: -1 }.
 */
export class DockerSandbox {
    image;
    client;
    constructor(image = SEED_IMAGE, options = {}) {
        this.image = image;
        this.client = new Sandbox(options);
    }
    async execute(code) {
        const image = this.image === SEED_IMAGE ? "python" : this.image;
        let r;
        try {
            r = await this.client.run(code, { image, limits: { memory: "512m", cpus: 1, network: false, tmpfs: "64m" } });
        }
        catch (e) {
            return { success: false, output: `Sandbox error: ${e.message}`, exitCode: -1 };
        }
        if (r.status === "rejected" || r.status === "error") {
            return { success: false, output: `Sandbox error: ${r.error ?? r.status}`, exitCode: -1 };
        }
        let output = outputOf(r);
        if (r.status !== "succeeded" && r.status !== "failed" && r.error) {
            output += (output && !output.endsWith("\n") ? "\n" : "") + `[sandfleet] ${r.status}: ${r.error}\n`;
        }
        return { success: r.status === "succeeded", output, exitCode: r.exit_code ?? EXIT_BY_STATUS[r.status] ?? -1 };
    }
}
async function sha256Hex(data) {
    const sum = new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", data));
    return Array.from(sum, (b) => b.toString(16).padStart(2, "0")).join("");
}
function toolCallOf(call) {
    if ("function" in call && call.function)
        return [call.function.name, call.function.arguments, "openai", call.id ?? ""];
    if ("type" in call && call.type === "tool_use")
        return [call.name, call.input, "anthropic", call.id];
    throw new SandfleetError("not a tool call: want OpenAI's {function: {name, arguments}} or Anthropic's {type: tool_use, name, input}", "invalid_request");
}
/** A tool call's result: MCP's content parts (text, image) and isError. */
export class ToolResult {
    shape;
    callId;
    content;
    isError;
    constructor(raw, shape = "", callId = "") {
        this.shape = shape;
        this.callId = callId;
        this.content = raw.content ?? [];
        this.isError = raw.isError ?? false;
    }
    /** The text parts, joined: what a text-only model reads. */
    get text() {
        return this.content.filter((p) => p.type === "text").map((p) => p.text ?? "").join("\n");
    }
    /** A Chat Completions tool message. Its content is text only (the API takes no images there): an image is named. */
    toOpenAI(toolCallId) {
        const parts = this.content.flatMap((p) => p.type === "text" ? [p.text ?? ""] : p.type === "image" ? [`[an image, ${p.mimeType ?? "?"}, ${(p.data ?? "").length} bytes of base64]`] : []);
        return { role: "tool", tool_call_id: toolCallId ?? this.callId, content: parts.join("\n") };
    }
    /** A Messages API tool_result block, images as image blocks. */
    toAnthropic(toolUseId) {
        const content = this.content.flatMap((p) => p.type === "text"
            ? [{ type: "text", text: p.text ?? "" }]
            : p.type === "image"
                ? [{ type: "image", source: { type: "base64", media_type: p.mimeType ?? "image/png", data: p.data ?? "" } }]
                : []);
        return { type: "tool_result", tool_use_id: toolUseId ?? this.callId, content, is_error: this.isError };
    }
    /** The reply in the shape of the call it answers. */
    toMessage() {
        return this.shape === "anthropic" ? this.toAnthropic() : this.toOpenAI();
    }
}
