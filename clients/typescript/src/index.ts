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

/** Resource limits of a job; every field defaults on the worker. */
export interface Limits {
  timeout?: string | number; // "30s", "1m30s" or seconds
  memory?: string | number; // "512m", "1g" or bytes
  cpus?: number;
  pids?: number;
  network?: boolean;
  output?: string | number;
  tmpfs?: string | number;
}

/** A job, as the fleet's wire format. */
export interface Job {
  id?: string;
  queue?: string;
  image?: string;
  code?: string;
  argv?: string[];
  files?: Record<string, string>;
  stdin?: string;
  env?: Record<string, string>;
  limits?: Limits;
  labels?: Record<string, string>;
  /** For fleets with workspaces; others refuse it (unknown_field). */
  workspace?: string;
  /** For fleets with artifacts; others refuse it (unknown_field). */
  outputs?: string[];
}

export type Status = "succeeded" | "failed" | "compile_error" | "timeout" | "oom" | "output_limit" | "canceled" | "rejected" | "error";

/** A job's result, as the fleet's wire format. */
export interface Result {
  id: string;
  status: Status;
  exit_code: number | null;
  stdout: string;
  stderr: string;
  stdout_truncated: boolean;
  stderr_truncated: boolean;
  stdout_encoding?: "base64";
  stderr_encoding?: "base64";
  duration_ms: number | null;
  cpu_ms: number | null;
  peak_memory_bytes: number | null;
  worker: string;
  attempt: number;
  queued_at: string | null;
  started_at: string | null;
  finished_at: string | null;
  error?: string;
  labels?: Record<string, string>;
  workspace?: Record<string, unknown>;
  artifacts?: Artifact[];
  artifacts_skipped?: { name: string; size: number; reason: string }[];
  /** What was left out for the result to fit the server's limit, one line per field. */
  cut?: string[];
}

/** A file a job kept from its outputs. */
export interface Artifact {
  name: string;
  size: number;
  sha256: string;
  key: string;
}

/** GET /v1/jobs/{id}/artifacts. */
export interface ArtifactList {
  id: string;
  artifacts: Artifact[];
  skipped: { name: string; size: number; reason: string }[];
  error?: string;
}

/** A piece of a job's output, as Sandbox.stream yields it. */
export interface Output {
  stream: "stdout" | "stderr";
  text: string;
}

/** One line of a batch's answer: its result, or why it is bad. */
export interface BatchItem {
  line: number;
  result?: Result;
  error?: SandfleetError;
  reused?: boolean;
}

/** An error answer of the API, or a failure to reach it. */
export class SandfleetError extends Error {
  /** The server's stable code, "unreachable" without an answer, "timeout" when the caller's wait ran out. */
  readonly code: string;
  /** HTTP status; 0 without an answer. */
  readonly status: number;
  /** Seconds the server asked to wait (429, 503). */
  readonly retryAfter?: number;

  constructor(message: string, code: string, status = 0, retryAfter?: number) {
    super(code ? `${code}: ${message}` : message);
    this.name = "SandfleetError";
    this.code = code;
    this.status = status;
    this.retryAfter = retryAfter;
  }
}

export interface SandboxOptions {
  /** Default $SANDFLEET_URL, else http://127.0.0.1:8080. */
  url?: string;
  /** Default $SANDFLEET_TOKEN; none for a gateway on loopback without tokens. */
  token?: string;
  /** Bound on each HTTP exchange, in ms (a long poll gets its wait on top). Default 30000. */
  timeoutMs?: number;
  /** Retries on 429, 503 or no answer. Default 5. */
  retries?: number;
  /** First backoff, in ms, doubled each retry. Default 250. */
  backoffMs?: number;
  /** Default image (preset). Default "python". */
  image?: string;
  queue?: string;
}

export interface RunOptions extends Omit<Job, "code"> {
  /** Bound on the wait for the result, in ms; past it a SandfleetError with code "timeout" (the job goes on). */
  timeoutMs?: number;
}

function env(name: string): string | undefined {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return p?.env?.[name] || undefined;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A UUIDv7 (time-ordered, 74 random bits), as the fleet makes them. */
export async function newId(): Promise<string> {
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

async function randomBytes(b: Uint8Array): Promise<void> {
  const c = (globalThis as { crypto?: { getRandomValues?: (a: Uint8Array) => Uint8Array } }).crypto;
  if (c?.getRandomValues) {
    c.getRandomValues(b);
    return;
  }
  const spec = "node:crypto"; // Node 18 has Web Crypto only as a module
  const m = await import(spec);
  m.webcrypto.getRandomValues(b);
}

function secs(ms: number): string {
  return String(Math.max(0, Math.round(ms)) / 1000);
}

function decode(s: string, encoding?: string): string {
  if (encoding !== "base64") return s;
  const bin = atob(s);
  return new TextDecoder().decode(Uint8Array.from(bin, (ch) => ch.charCodeAt(0)));
}

/** stdout then stderr, as text. */
export function outputOf(r: Result): string {
  return decode(r.stdout, r.stdout_encoding) + decode(r.stderr, r.stderr_encoding);
}

/** A client of a sandfleet gateway. */
export class Sandbox {
  readonly url: string;
  readonly token?: string;
  private readonly timeoutMs: number;
  private readonly retries: number;
  private readonly backoffMs: number;
  private readonly image: string;
  private readonly queue?: string;

  constructor(options: SandboxOptions = {}) {
    this.url = (options.url ?? env("SANDFLEET_URL") ?? DEFAULT_URL).replace(/\/+$/, "");
    this.token = options.token ?? env("SANDFLEET_TOKEN");
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.retries = options.retries ?? 5;
    this.backoffMs = options.backoffMs ?? 250;
    this.image = options.image ?? "python";
    this.queue = options.queue;
  }

  /** The Job JSON run and submit send: defaults filled, an ID given. */
  async job(code: string | undefined, options: Omit<RunOptions, "timeoutMs"> = {}): Promise<Job> {
    const job: Job = { image: this.image, ...options, id: options.id ?? (await newId()) };
    if (code !== undefined) job.code = code;
    if (job.queue === undefined && this.queue !== undefined) job.queue = this.queue;
    return job;
  }

  /** Run a job and return its result, whatever its status. */
  async run(code?: string, options: RunOptions = {}): Promise<Result> {
    const { timeoutMs, ...rest } = options;
    const job = await this.job(code, rest);
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    const wait = Math.min(LONG_POLL_S * 1000, timeoutMs ?? Infinity);
    const { status, body } = await this.request("POST", "/v1/jobs", { query: { wait: secs(wait) }, body: job, waitMs: wait });
    if (status === 200) return body as Result;
    return this.wait((body as { id: string }).id, deadline === undefined ? undefined : deadline - Date.now());
  }

  /** Queue a job and return its ID at once. */
  async submit(code?: string, options: Omit<RunOptions, "timeoutMs"> = {}): Promise<string> {
    const { body } = await this.request("POST", "/v1/jobs", { body: await this.job(code, options) });
    return (body as { id: string }).id;
  }

  /** The job's result, or null while it is queued or running. */
  async get(id: string): Promise<Result | null> {
    const { status, body } = await this.request("GET", `/v1/jobs/${encodeURIComponent(id)}`);
    return status === 200 ? (body as Result) : null;
  }

  /** Wait for the job's result, in long polls of up to 30 s. */
  async wait(id: string, timeoutMs?: number): Promise<Result> {
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    for (;;) {
      const left = deadline === undefined ? LONG_POLL_S * 1000 : deadline - Date.now();
      if (left <= 0) throw new SandfleetError(`job ${id}: no result within ${timeoutMs} ms`, "timeout");
      const wait = Math.min(LONG_POLL_S * 1000, left);
      const { status, body } = await this.request("GET", `/v1/jobs/${encodeURIComponent(id)}`, {
        query: { wait: secs(wait) },
        waitMs: wait,
      });
      if (status === 200) return body as Result;
    }
  }

  /** Cancel a job: its canceled result, or null when the cancel is recorded and no worker has carried it out yet. */
  async cancel(id: string): Promise<Result | null> {
    const { status, body } = await this.request("POST", `/v1/jobs/${encodeURIComponent(id)}/cancel`, { waitMs: 5000 });
    return status === 200 ? (body as Result) : null;
  }

  /**
   * Run a job and yield its output as it comes; the generator returns the
   * result. A gateway without live output (501) yields the whole output
   * once the job has finished.
   */
  async *stream(code?: string, options: RunOptions = {}): AsyncGenerator<Output, Result> {
    const { timeoutMs, ...rest } = options;
    const id = await this.submit(code, rest);
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    // The stream has no timeout of its own (a job may be silent for long):
    // the caller's aborts it, body and all.
    const ctl = new AbortController();
    const timer = timeoutMs === undefined ? undefined : setTimeout(() => ctl.abort(), timeoutMs);
    const timedOut = () => new SandfleetError(`job ${id}: no result within ${timeoutMs} ms`, "timeout");
    let result: Result | undefined;
    try {
      let resp: Response;
      try {
        resp = await this.open("GET", `/v1/jobs/${encodeURIComponent(id)}/events`, { waitMs: null, signal: ctl.signal });
      } catch (e) {
        if (ctl.signal.aborted) throw timedOut();
        if (!(e instanceof SandfleetError) || e.code !== "not_implemented") throw e;
        const r = await this.wait(id, timeoutMs);
        if (r.stdout) yield { stream: "stdout", text: decode(r.stdout, r.stdout_encoding) };
        if (r.stderr) yield { stream: "stderr", text: decode(r.stderr, r.stderr_encoding) };
        return r;
      }
      try {
        for await (const [event, data] of sse(resp)) {
          if (event === "stdout" || event === "stderr") yield { stream: event, text: String(data.text ?? "") };
          else if (event === "finished" && data.result) result = data.result as Result;
        }
      } catch (e) {
        if (ctl.signal.aborted) throw timedOut();
        throw e;
      }
    } finally {
      if (timer !== undefined) clearTimeout(timer);
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
  async *batch(
    jobs: Iterable<Job>,
    options: { name?: string; window?: number; queue?: string; strict?: boolean } = {},
  ): AsyncGenerator<BatchItem, Record<string, unknown> | undefined> {
    let body = "";
    for (const j of jobs) body += JSON.stringify(j) + "\n";
    const query: Record<string, string | undefined> = {
      name: options.name,
      window: options.window?.toString(),
      queue: options.queue,
      strict: options.strict ? "true" : undefined,
    };
    const resp = await this.open("POST", "/v1/batches", { query, raw: body, contentType: "application/x-ndjson", waitMs: null });
    let summary: Record<string, unknown> | undefined;
    for await (const line of lines(resp)) {
      if (!line.trim()) continue;
      const ev = JSON.parse(line);
      if (ev.summary) summary = ev.summary;
      else if (ev.result) yield { line: ev.line, result: ev.result, reused: !!ev.reused };
      else if (ev.line) yield { line: ev.line, error: new SandfleetError(ev.error.message, ev.error.code, 400) };
      else throw new SandfleetError(ev.error.message, ev.error.code);
    }
    return summary;
  }

  /** What a finished job kept of its outputs, and what it skipped; a job without a result yet throws (code not_finished). */
  async artifacts(id: string): Promise<ArtifactList> {
    const { status, body } = await this.request("GET", `/v1/jobs/${encodeURIComponent(id)}/artifacts`);
    if (status !== 200) throw new SandfleetError(`job ${id} has not finished`, "not_finished", status);
    return body as ArtifactList;
  }

  /** One artifact's bytes (its name as listed, e.g. "results/plot.png"). */
  async artifact(id: string, name: string): Promise<Uint8Array> {
    const path = name.split("/").map(encodeURIComponent).join("/");
    return this.download(`/v1/jobs/${encodeURIComponent(id)}/artifacts/${path}`);
  }

  /** A workspace's head: revision, size_bytes, files, job, kept. */
  async workspace(name: string): Promise<Record<string, unknown>> {
    return (await this.request("GET", `/v1/workspaces/${encodeURIComponent(name)}`)).body as Record<string, unknown>;
  }

  /** A workspace's snapshot (its head, or a revision it keeps): the bytes of a tar archive. */
  async snapshot(name: string, revision?: number): Promise<Uint8Array> {
    return this.download(`/v1/workspaces/${encodeURIComponent(name)}/snapshot`, { revision: revision?.toString() });
  }

  private async download(path: string, query?: Record<string, string | undefined>): Promise<Uint8Array> {
    const resp = await this.open("GET", path, { query, waitMs: 0 });
    if (resp.status !== 200) throw new SandfleetError(`${path}: the job has not finished`, "not_finished", resp.status);
    const want = resp.headers.get("Content-Length");
    let data: Uint8Array;
    try {
      data = new Uint8Array(await resp.arrayBuffer());
    } catch (e) {
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
  async status(): Promise<Record<string, unknown>> {
    return (await this.request("GET", "/v1/status")).body as Record<string, unknown>;
  }

  // Sessions ---------------------------------------------------------------

  /** Start a session: a sandbox kept across calls (POST /v1/sessions). End it with close(), or `await using`. */
  async createSession(spec: SessionSpec = {}): Promise<Session> {
    const { idleTimeoutMs, maxLifetimeMs, ...rest } = spec;
    const body: Record<string, unknown> = { image: this.image, ...rest };
    if (idleTimeoutMs !== undefined) body.idle_timeout = secs(idleTimeoutMs) + "s";
    if (maxLifetimeMs !== undefined) body.max_lifetime = secs(maxLifetimeMs) + "s";
    const { body: info } = await this.request("POST", "/v1/sessions", { body, headers: { "Idempotency-Key": await newId() }, waitMs: 120_000 });
    return new Session(this, info as SessionInfo);
  }

  /** A session made earlier, by its ID. */
  async session(id: string): Promise<Session> {
    const { body } = await this.request("GET", `/v1/sessions/${encodeURIComponent(id)}`);
    return new Session(this, body as SessionInfo);
  }

  /** This token's sessions' records, running first. */
  async sessions(): Promise<SessionInfo[]> {
    return ((await this.request("GET", "/v1/sessions")).body as { sessions: SessionInfo[] }).sessions;
  }

  // Tools, for a model's function calls --------------------------------------

  /** The tools as a model's definitions (GET /v1/tools): "openai" (Chat Completions' {type: "function", ...}), "anthropic" ({name, description, input_schema}) or "mcp". */
  async tools(format: "openai" | "anthropic" | "mcp" = "openai"): Promise<Record<string, unknown>[]> {
    const { body } = await this.request("GET", "/v1/tools", { query: { format } });
    return (body as { tools: Record<string, unknown>[] }).tools;
  }

  /**
   * Run one tool call as /mcp's tools/call would (POST /v1/tools/NAME). `call` is a tool's name (then `args` an
   * object, or a JSON string as OpenAI gives it), or a model's call as its API hands it over: OpenAI's tool call
   * ({id, type: "function", function: {name, arguments}}) or Anthropic's tool_use block ({type: "tool_use", id, name,
   * input}). A failing program is a result with isError, never a throw; toMessage() is the reply to hand the model
   * back, in the shape of the call.
   */
  async callTool(call: string | ToolCall, args?: Record<string, unknown> | string): Promise<ToolResult> {
    let name: string, shape: ToolShape = "", id = "";
    if (typeof call === "string") name = call;
    else [name, args, shape, id] = toolCallOf(call);
    let input: unknown = args ?? {};
    if (typeof args === "string") {
      try {
        input = args.trim() ? JSON.parse(args) : {};
      } catch (e) {
        // A model's arguments that are not JSON are its mistake to correct, told as the server tells a schema's refusal.
        const text = `validating "arguments": not JSON (${(e as Error).message}): ${args}`;
        return new ToolResult({ isError: true, content: [{ type: "text", text: text.length > 1000 ? text.slice(0, 1000) + "..." : text }] }, shape, id);
      }
    }
    const timeout = input !== null && typeof input === "object" ? Math.max(0, Number((input as { timeout?: unknown }).timeout ?? 0) || 0) : 0;
    const { body } = await this.request("POST", `/v1/tools/${encodeURIComponent(name)}`, { body: input, waitMs: (timeout + 60) * 1000 });
    return new ToolResult(body as { content?: ToolContent[]; isError?: boolean }, shape, id);
  }

  /** @internal A JSON call; what the session objects use. */
  async request(
    method: string,
    path: string,
    opts: { query?: Record<string, string | undefined>; body?: unknown; waitMs?: number; headers?: Record<string, string> } = {},
  ): Promise<{ status: number; body: unknown }> {
    const raw = opts.body === undefined ? undefined : JSON.stringify(opts.body);
    const resp = await this.open(method, path, { query: opts.query, raw, contentType: "application/json", waitMs: opts.waitMs ?? 0, headers: opts.headers });
    const text = await resp.text();
    return { status: resp.status, body: text ? JSON.parse(text) : undefined };
  }

  /** @internal fetch with the token, a timeout, and retries; non-2xx answers throw. waitMs null: no timeout (streams). */
  async open(
    method: string,
    path: string,
    opts: {
      query?: Record<string, string | undefined>;
      raw?: string | Uint8Array;
      headers?: Record<string, string>; // a retry sends the same (an Idempotency-Key)
      contentType?: string;
      waitMs: number | null;
      signal?: AbortSignal; // the caller's deadline, over the answer's body too
    },
  ): Promise<Response> {
    let url = this.url + path;
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(opts.query ?? {})) if (v !== undefined) q.set(k, v);
    if ([...q].length) url += "?" + q.toString();
    const headers: Record<string, string> = { Accept: "application/json", "User-Agent": `sandfleet-typescript/${VERSION}` };
    if (opts.raw !== undefined) headers["Content-Type"] = opts.contentType ?? "application/json";
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    Object.assign(headers, opts.headers);
    for (let attempt = 0; ; attempt++) {
      let err: SandfleetError;
      const ctl = new AbortController();
      const timer = opts.waitMs === null ? undefined : setTimeout(() => ctl.abort(), this.timeoutMs + opts.waitMs);
      try {
        if (opts.signal?.aborted) ctl.abort();
        opts.signal?.addEventListener("abort", () => ctl.abort(), { once: true });
        const resp = await fetch(url, { method, headers, body: opts.raw, signal: ctl.signal });
        if (resp.ok) return resp;
        err = await apiError(resp);
        if ((err.status !== 429 && err.status !== 503) || attempt >= this.retries) throw err;
      } catch (e) {
        if (e instanceof SandfleetError || opts.signal?.aborted) throw e;
        err = new SandfleetError(`cannot reach ${this.url}: ${(e as Error).message}`, "unreachable");
        if (attempt >= this.retries) throw err;
      } finally {
        if (timer !== undefined) clearTimeout(timer);
      }
      const delay = this.backoffMs * 2 ** attempt * (0.5 + Math.random() / 2);
      await sleep(Math.max(delay, (err.retryAfter ?? 0) * 1000));
    }
  }
}

async function apiError(resp: Response): Promise<SandfleetError> {
  const ra = Number(resp.headers.get("Retry-After"));
  const retryAfter = Number.isFinite(ra) && ra > 0 ? ra : undefined;
  try {
    const { error } = (await resp.json()) as { error: { code: string; message: string } };
    return new SandfleetError(error.message, error.code, resp.status, retryAfter);
  } catch {
    return new SandfleetError(resp.statusText || "HTTP error", `http_${resp.status}`, resp.status, retryAfter);
  }
}

async function* lines(resp: Response): AsyncGenerator<string> {
  if (!resp.body) return;
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i: number;
      while ((i = buf.indexOf("\n")) >= 0) {
        yield buf.slice(0, i);
        buf = buf.slice(i + 1);
      }
    }
  } finally {
    reader.cancel().catch(() => {}); // the reader left early: close the body
  }
  buf += dec.decode();
  if (buf) yield buf;
}

async function* sse(resp: Response): AsyncGenerator<[string, Record<string, unknown>]> {
  let event = "message";
  let data: string[] = [];
  for await (const raw of lines(resp)) {
    const line = raw.replace(/\r$/, "");
    if (line === "") {
      if (data.length) yield [event, JSON.parse(data.join("\n"))];
      event = "message";
      data = [];
    } else if (line.startsWith("event:")) event = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
  }
}

// Sessions -------------------------------------------------------------------

/** What a session is made of; the timeouts in ms. */
export interface SessionSpec {
  image?: string;
  limits?: Limits;
  env?: Record<string, string>;
  files?: Record<string, string>;
  idleTimeoutMs?: number;
  maxLifetimeMs?: number;
  labels?: Record<string, string>;
}

/** A session's record, as the gateway sends it. */
export interface SessionInfo {
  id: string;
  status: "running" | "ended";
  owner?: string;
  worker: string;
  image: string;
  limits: Limits;
  idle_timeout: string;
  max_lifetime: string;
  created_at: string;
  active_at: string;
  expires_at: string;
  ended_at?: string;
  end_reason?: string;
  labels?: Record<string, string>;
}

/** A command's end in a session (or, started in the background, its pid). */
export interface ExecResult {
  exitCode?: number;
  signal: number;
  timedOut: boolean;
  stdout: string;
  stderr: string;
  truncated: boolean;
  durationMs: number;
  pid?: number;
  /** It ran with no other process of the session alive (ExecOptions.exclusive). */
  exclusive: boolean;
  /** How many processes of the session were killed before it started. */
  ended: number;
  raw: Record<string, unknown>;
}

/** What a cell raised, as Python says it. */
export interface CodeError {
  name: string;
  value: string;
  traceback: string;
}

/** A cell's end: the trailing expression's value as text, its output, and what it raised. */
/** The languages of a session's code contexts. */
export type CodeLanguage = "python" | "javascript" | "typescript" | "bash";

export interface CodeResult {
  text?: string;
  stdout: string;
  stderr: string;
  error?: CodeError;
  reset: boolean;
  timedOut: boolean;
  /** The context's language. */
  language: string;
  /** A bash cell's status (its last command's). */
  exitCode?: number;
  raw: Record<string, unknown>;
}

/** A figure or other display output of a cell: its bytes in base64. */
export interface Display {
  mime: string;
  data: string;
  width?: number;
  height?: number;
}

/** A code cell a session ran, as its worker keeps it (text cut at its bounds: cut). */
export interface Cell {
  seq: number;
  at: string;
  duration_ms: number;
  context?: string;
  language?: string;
  exit_code?: number;
  code: string;
  text?: string;
  stdout?: string;
  stderr?: string;
  error?: CodeError;
  reset?: boolean;
  timed_out?: boolean;
  cut?: boolean;
  display?: Display[];
  display_dropped?: number;
}

/** A session's recent cells, oldest first; dropped counts those no longer kept. */
export interface CellList {
  cells: Cell[];
  dropped?: number;
}

export interface ExecOptions {
  cwd?: string;
  env?: Record<string, string>;
  stdin?: string;
  timeoutMs?: number;
  background?: boolean;
  /**
   * Kill every other process of the session first (background processes,
   * terminals, code contexts) and start none until the command ends, so
   * that nothing but the command can write into its output or touch its
   * exit code: for a verifier whose verdict grades the session's work.
   */
  exclusive?: boolean;
}

/** A file of a session, as listed. */
export interface Entry {
  name: string;
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  mode: number;
  mtime_ms: number;
  target?: string;
}

/** A background process of a session. */
export interface ProcessInfo {
  pid: number;
  cmd: string[];
  running: boolean;
  exit_code?: number;
  signal?: number;
  output_bytes: number;
}

/** A code context of a session: cwd is where its process is now. */
export interface ContextInfo {
  name: string;
  language: string;
  cwd: string;
  cells: number;
  created_ms: number;
}

/** A background process's output: "next" is the offset to ask from next. */
export interface ProcessOutput {
  pid: number;
  running: boolean;
  exit_code?: number;
  signal?: number;
  output: string;
  next: number;
  dropped?: number;
}

type Json = Record<string, unknown>;

/** The longest a call waits for a command or cell that names no timeout (the worker's cap bounds it). */
const CALL_WAIT_MS = 600_000;

function filePath(p: string): string {
  return p.split("/").map(encodeURIComponent).join("/");
}

/** A sandbox kept across calls. Made by Sandbox.createSession; `await using` (or close) ends it. */
export class Session {
  readonly id: string;
  info: SessionInfo;
  readonly files: Files;
  readonly processes: Processes;
  readonly ports: Ports;
  /** @internal */
  readonly path: string;

  constructor(readonly sandbox: Sandbox, info: SessionInfo) {
    this.id = info.id;
    this.info = info;
    this.path = `/v1/sessions/${encodeURIComponent(info.id)}`;
    this.files = new Files(this);
    this.processes = new Processes(this);
    this.ports = new Ports(this);
  }

  /** Where `port` of the session is reached through the gateway (once exposed: ports.expose), with this client's token. */
  getUrl(port: number): string {
    return `${this.sandbox.url}${this.path}/ports/${Math.trunc(port)}/`;
  }

  /** @internal A call on the session: a mutating one with an Idempotency-Key, so that a retry runs once. */
  async call(method: string, rel: string, body?: unknown, opts: { waitMs?: number; query?: Record<string, string | undefined> } = {}): Promise<Json> {
    const headers = method === "GET" ? undefined : { "Idempotency-Key": await newId() };
    return (await this.sandbox.request(method, this.path + rel, { body, headers, ...opts })).body as Json;
  }

  /** Run a command: a string goes to /bin/sh -c, an array is an argv. */
  async exec(cmd: string | string[], opts: ExecOptions = {}): Promise<ExecResult> {
    const body: Json = typeof cmd === "string" ? { shell: cmd } : { cmd };
    if (opts.cwd !== undefined) body.cwd = opts.cwd;
    if (opts.env !== undefined) body.env = opts.env;
    if (opts.stdin !== undefined) body.stdin = opts.stdin;
    if (opts.timeoutMs !== undefined) body.timeout = secs(opts.timeoutMs) + "s";
    if (opts.background) body.background = true;
    if (opts.exclusive) body.exclusive = true;
    const d = await this.call("POST", "/exec", body, { waitMs: opts.timeoutMs ?? CALL_WAIT_MS });
    return {
      exitCode: d.exit_code as number | undefined,
      signal: (d.signal as number) ?? 0,
      timedOut: Boolean(d.timed_out),
      stdout: decode((d.stdout as string) ?? "", d.stdout_encoding as string | undefined),
      stderr: decode((d.stderr as string) ?? "", d.stderr_encoding as string | undefined),
      truncated: Boolean(d.stdout_truncated || d.stderr_truncated),
      durationMs: (d.duration_ms as number) ?? 0,
      pid: d.pid as number | undefined,
      exclusive: Boolean(d.exclusive),
      ended: (d.ended as number) ?? 0,
      raw: d,
    };
  }

  /**
   * Run a cell in a stateful context of `language`: "python" (the default),
   * "javascript", "typescript" or "bash". The context defaults to "default"
   * for python and to the language's name for the others.
   */
  async runCode(code: string, opts: { language?: CodeLanguage; context?: string; timeoutMs?: number } = {}): Promise<CodeResult> {
    const body: Json = { code };
    if (opts.language) body.language = opts.language;
    if (opts.context) body.context = opts.context;
    if (opts.timeoutMs !== undefined) body.timeout = secs(opts.timeoutMs) + "s";
    const d = await this.call("POST", "/code", body, { waitMs: opts.timeoutMs ?? CALL_WAIT_MS });
    return {
      text: d.text as string | undefined,
      stdout: decode((d.stdout as string) ?? "", d.stdout_encoding as string | undefined),
      stderr: decode((d.stderr as string) ?? "", d.stderr_encoding as string | undefined),
      error: d.error as CodeError | undefined,
      reset: Boolean(d.reset),
      timedOut: Boolean(d.timed_out),
      language: (d.language as string | undefined) ?? "python",
      exitCode: d.exit_code as number | undefined,
      raw: d,
    };
  }

  /** Its code contexts, by name. */
  async contexts(): Promise<ContextInfo[]> {
    return (await this.call("GET", "/contexts")).contexts as unknown as ContextInfo[];
  }

  /**
   * Start a code context in `cwd` (default the session's directory):
   * `runCode(..., { context: name })` runs in it. A name taken already
   * rejects with SandfleetError "exists"; past 16 contexts,
   * "too_many_requests". Without a name it takes its language's default
   * name when free.
   */
  async createContext(opts: { language?: CodeLanguage; name?: string; cwd?: string } = {}): Promise<ContextInfo> {
    const body: Json = { language: opts.language ?? "python" };
    if (opts.name) body.name = opts.name;
    if (opts.cwd) body.cwd = opts.cwd;
    return (await this.call("POST", "/contexts", body)) as unknown as ContextInfo;
  }

  /** End a code context: its process is killed and its name is free. */
  async deleteContext(name: string): Promise<void> {
    await this.call("DELETE", `/contexts/${encodeURIComponent(name)}`);
  }

  /**
   * Its recent code cells, oldest first, as its worker keeps them (the last
   * 20; an ended session's for 15 minutes). A read: the idle timeout goes
   * on, and a paused session is not resumed (`gone`).
   */
  async cells(): Promise<CellList> {
    return (await this.call("GET", "/cells")) as unknown as CellList;
  }

  /** Count as a call: the idle timeout starts again. */
  async keepalive(): Promise<SessionInfo> {
    this.info = (await this.call("POST", "/keepalive")) as unknown as SessionInfo;
    return this.info;
  }

  /**
   * Replace the running session's egress policy, within the worker's caps:
   * a limits.network value (`{allow: [...]}`, or `"none"` to lock it after
   * the installs). The proxy applies it at once.
   */
  async setNetwork(network: Json | string | boolean): Promise<SessionInfo> {
    this.info = (await this.call("PUT", "/network", network)) as unknown as SessionInfo;
    return this.info;
  }

  /** The session's record as it is now. */
  async refresh(): Promise<SessionInfo> {
    this.info = (await this.call("GET", "")) as unknown as SessionInfo;
    return this.info;
  }

  /** End the session; ending one that has ended already is no error. */
  async close(): Promise<void> {
    try {
      this.info = (await this.call("DELETE", "")) as unknown as SessionInfo;
    } catch (e) {
      if (!(e instanceof SandfleetError) || (e.code !== "gone" && e.code !== "not_found")) throw e;
    }
  }
}

// `await using s = await sb.createSession()`: where the runtime has
// Symbol.asyncDispose (Node 20.4+), a session is async-disposable.
const asyncDispose = (Symbol as unknown as { asyncDispose?: symbol }).asyncDispose;
if (asyncDispose) {
  Object.defineProperty(Session.prototype, asyncDispose, {
    value: function (this: Session) {
      return this.close();
    },
  });
}

/** A session's files: paths are relative to /workspace, or under /tmp. */
export class Files {
  constructor(private readonly s: Session) {}

  async read(path: string): Promise<Uint8Array> {
    const resp = await this.s.sandbox.open("GET", `${this.s.path}/files/${filePath(path)}`, { waitMs: 0 });
    return new Uint8Array(await resp.arrayBuffer());
  }

  async readText(path: string): Promise<string> {
    return new TextDecoder().decode(await this.read(path));
  }

  async write(path: string, data: string | Uint8Array, opts: { mode?: number } = {}): Promise<Entry> {
    const raw = typeof data === "string" ? new TextEncoder().encode(data) : data;
    const resp = await this.s.sandbox.open("PUT", `${this.s.path}/files/${filePath(path)}`, {
      query: { mode: opts.mode?.toString(8) },
      raw,
      contentType: "application/octet-stream",
      headers: { "Idempotency-Key": await newId() },
      waitMs: 0,
    });
    return (await resp.json()) as Entry;
  }

  async list(dir = "."): Promise<Entry[]> {
    return (await this.s.call("GET", "/files", undefined, { query: { dir } })).entries as Entry[];
  }

  async remove(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    await this.s.call("DELETE", `/files/${filePath(path)}`, undefined, { query: { recursive: opts.recursive ? "true" : undefined } });
  }
}

/** An exposed port: where it is reached; from expose, a preview token for it and when that expires. */
export interface PortInfo {
  port: number;
  url: string;
  token?: string;
  expires_at?: string;
}

/** A session's exposed ports: a server it runs on the sandbox's 127.0.0.1, reached through the gateway at Session.getUrl(port). */
export class Ports {
  constructor(private readonly s: Session) {}

  /**
   * Expose `port` (1024 to 65535). The answer's token is a preview token
   * good for this port alone until expires_at (ttlMs, default an hour),
   * which a request may carry instead of the owner's token
   * (X-Sandfleet-Preview-Token, or ?sandfleet_preview=). With waitMs the
   * call first waits that long at most for the server to accept a
   * connection (SandfleetError "timeout" if it does not).
   */
  async expose(port: number, opts: { ttlMs?: number; waitMs?: number } = {}): Promise<PortInfo> {
    const body: Json = { port };
    if (opts.ttlMs) body.ttl = secs(opts.ttlMs) + "s";
    if (opts.waitMs) body.wait = secs(opts.waitMs) + "s";
    return (await this.s.call("POST", "/ports", body, { waitMs: opts.waitMs ?? 0 })) as unknown as PortInfo;
  }

  /** The ports exposed. */
  async list(): Promise<PortInfo[]> {
    return (await this.s.call("GET", "/ports")).ports as unknown as PortInfo[];
  }

  /** Stop exposing `port`: its URL and preview tokens answer 404, and the connections open to it are closed. */
  async unexpose(port: number): Promise<void> {
    await this.s.call("DELETE", `/ports/${Math.trunc(port)}`);
  }
}

/** A session's background processes (started with exec(..., { background: true })). */
export class Processes {
  constructor(private readonly s: Session) {}

  async list(): Promise<ProcessInfo[]> {
    return (await this.s.call("GET", "/processes")).processes as ProcessInfo[];
  }

  /** Its output from offset since; with waitMs, after waiting that long at most for it to end. */
  async output(pid: number, opts: { since?: number; waitMs?: number } = {}): Promise<ProcessOutput> {
    const query = { since: String(opts.since ?? 0), wait: opts.waitMs ? secs(opts.waitMs) + "s" : undefined };
    const d = await this.s.call("GET", `/processes/${pid}`, undefined, { query, waitMs: opts.waitMs ?? 0 });
    return { ...(d as unknown as ProcessOutput), output: decode((d.output as string) ?? "", d.output_encoding as string | undefined) };
  }

  async signal(pid: number, signal = 15): Promise<void> {
    await this.s.call("POST", `/processes/${pid}/signal`, { signal });
  }

  async stdin(pid: number, data: string | Uint8Array, opts: { eof?: boolean } = {}): Promise<void> {
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

// The seed's interface ---------------------------------------------------------

/** The seed's result shape. */
export interface SandboxResult {
  success: boolean;
  output: string;
  exitCode: number;
}

const SEED_IMAGE = "agent-sandbox:latest"; // the seed's image runs python -c: the python preset
const EXIT_BY_STATUS: Record<string, number> = { timeout: 124, oom: 137, canceled: 130, output_limit: 1, failed: 1, compile_error: 65 };

/**
 * The seed's DockerSandbox, running on the fleet instead of a local Docker
 * engine, with the seed's limits (512 MiB, 1 CPU, no network, read-only
 * root with a 64 MiB /tmp). execute never rejects: a failure to reach the
 * fleet is { success: false, output: "Sandbox error: ...", exitCode: -1 }.
 */
export class DockerSandbox {
  private readonly client: Sandbox;

  constructor(private image = SEED_IMAGE, options: SandboxOptions = {}) {
    this.client = new Sandbox(options);
  }

  async execute(code: string): Promise<SandboxResult> {
    const image = this.image === SEED_IMAGE ? "python" : this.image;
    let r: Result;
    try {
      r = await this.client.run(code, { image, limits: { memory: "512m", cpus: 1, network: false, tmpfs: "64m" } });
    } catch (e) {
      return { success: false, output: `Sandbox error: ${(e as Error).message}`, exitCode: -1 };
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

async function sha256Hex(data: Uint8Array): Promise<string> {
  const sum = new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", data));
  return Array.from(sum, (b) => b.toString(16).padStart(2, "0")).join("");
}

// Tools --------------------------------------------------------------------------

/** A model's tool call: OpenAI's (function.arguments a JSON string) or Anthropic's tool_use block (input an object). */
export type ToolCall =
  | { id?: string; type?: "function"; function: { name: string; arguments: string } }
  | { type: "tool_use"; id: string; name: string; input: Record<string, unknown> };

/** One part of a tool's result, as MCP gives it. */
export interface ToolContent {
  type: string;
  text?: string;
  data?: string; // base64, of an image
  mimeType?: string;
  [key: string]: unknown;
}

type ToolShape = "" | "openai" | "anthropic";

function toolCallOf(call: ToolCall): [string, Record<string, unknown> | string, ToolShape, string] {
  if ("function" in call && call.function) return [call.function.name, call.function.arguments, "openai", call.id ?? ""];
  if ("type" in call && call.type === "tool_use") return [call.name, call.input, "anthropic", call.id];
  throw new SandfleetError("not a tool call: want OpenAI's {function: {name, arguments}} or Anthropic's {type: tool_use, name, input}", "invalid_request");
}

/** A tool call's result: MCP's content parts (text, image) and isError. */
export class ToolResult {
  readonly content: ToolContent[];
  readonly isError: boolean;
  constructor(raw: { content?: ToolContent[]; isError?: boolean }, readonly shape: ToolShape = "", readonly callId = "") {
    this.content = raw.content ?? [];
    this.isError = raw.isError ?? false;
  }

  /** The text parts, joined: what a text-only model reads. */
  get text(): string {
    return this.content.filter((p) => p.type === "text").map((p) => p.text ?? "").join("\n");
  }

  /** A Chat Completions tool message. Its content is text only (the API takes no images there): an image is named. */
  toOpenAI(toolCallId?: string): { role: "tool"; tool_call_id: string; content: string } {
    const parts = this.content.flatMap((p) =>
      p.type === "text" ? [p.text ?? ""] : p.type === "image" ? [`[an image, ${p.mimeType ?? "?"}, ${(p.data ?? "").length} bytes of base64]`] : [],
    );
    return { role: "tool", tool_call_id: toolCallId ?? this.callId, content: parts.join("\n") };
  }

  /** A Messages API tool_result block, images as image blocks. */
  toAnthropic(toolUseId?: string): { type: "tool_result"; tool_use_id: string; content: Record<string, unknown>[]; is_error: boolean } {
    const content = this.content.flatMap((p): Record<string, unknown>[] =>
      p.type === "text"
        ? [{ type: "text", text: p.text ?? "" }]
        : p.type === "image"
          ? [{ type: "image", source: { type: "base64", media_type: p.mimeType ?? "image/png", data: p.data ?? "" } }]
          : [],
    );
    return { type: "tool_result", tool_use_id: toolUseId ?? this.callId, content, is_error: this.isError };
  }

  /** The reply in the shape of the call it answers. */
  toMessage(): Record<string, unknown> {
    return this.shape === "anthropic" ? this.toAnthropic() : this.toOpenAI();
  }
}
