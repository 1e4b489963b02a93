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
export declare const VERSION = "0.1.0";
/** Where `worker --embedded` (make run) serves the API. */
export declare const DEFAULT_URL = "http://127.0.0.1:8080";
/** Resource limits of a job; every field defaults on the worker. */
export interface Limits {
    timeout?: string | number;
    memory?: string | number;
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
export declare type Status = "succeeded" | "failed" | "compile_error" | "timeout" | "oom" | "output_limit" | "canceled" | "rejected" | "error";
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
    artifacts_skipped?: {
        name: string;
        size: number;
        reason: string;
    }[];
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
    skipped: {
        name: string;
        size: number;
        reason: string;
    }[];
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
export declare class SandfleetError extends Error {
    /** The server's stable code, "unreachable" without an answer, "timeout" when the caller's wait ran out. */
    readonly code: string;
    /** HTTP status; 0 without an answer. */
    readonly status: number;
    /** Seconds the server asked to wait (429, 503). */
    readonly retryAfter?: number;
    constructor(message: string, code: string, status?: number, retryAfter?: number);
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
/** A UUIDv7 (time-ordered, 74 random bits), as the fleet makes them. */
export declare function newId(): Promise<string>;
/** stdout then stderr, as text. */
export declare function outputOf(r: Result): string;
/** A client of a sandfleet gateway. */
export declare class Sandbox {
    readonly url: string;
    readonly token?: string;
    private readonly timeoutMs;
    private readonly retries;
    private readonly backoffMs;
    private readonly image;
    private readonly queue?;
    constructor(options?: SandboxOptions);
    /** The Job JSON run and submit send: defaults filled, an ID given. */
    job(code: string | undefined, options?: Omit<RunOptions, "timeoutMs">): Promise<Job>;
    /** Run a job and return its result, whatever its status. */
    run(code?: string, options?: RunOptions): Promise<Result>;
    /** Queue a job and return its ID at once. */
    submit(code?: string, options?: Omit<RunOptions, "timeoutMs">): Promise<string>;
    /** The job's result, or null while it is queued or running. */
    get(id: string): Promise<Result | null>;
    /** Wait for the job's result, in long polls of up to 30 s. */
    wait(id: string, timeoutMs?: number): Promise<Result>;
    /** Cancel a job: its canceled result, or null when the cancel is recorded and no worker has carried it out yet. */
    cancel(id: string): Promise<Result | null>;
    /**
     * Run a job and yield its output as it comes; the generator returns the
     * result. A gateway without live output (501) yields the whole output
     * once the job has finished.
     */
    stream(code?: string, options?: RunOptions): AsyncGenerator<Output, Result>;
    /**
     * Run jobs as one batch and yield each line's outcome in the order they
     * finish; the generator returns the summary. The same jobs under the
     * same name reuse the results already stored.
     */
    batch(jobs: Iterable<Job>, options?: {
        name?: string;
        window?: number;
        queue?: string;
        strict?: boolean;
    }): AsyncGenerator<BatchItem, Record<string, unknown> | undefined>;
    /** What a finished job kept of its outputs, and what it skipped; a job without a result yet throws (code not_finished). */
    artifacts(id: string): Promise<ArtifactList>;
    /** One artifact's bytes (its name as listed, e.g. "results/plot.png"). */
    artifact(id: string, name: string): Promise<Uint8Array>;
    /** A workspace's head: revision, size_bytes, files, job, kept. */
    workspace(name: string): Promise<Record<string, unknown>>;
    /** A workspace's snapshot (its head, or a revision it keeps): the bytes of a tar archive. */
    snapshot(name: string, revision?: number): Promise<Uint8Array>;
    private download;
    /** The fleet's workers and queues. */
    status(): Promise<Record<string, unknown>>;
    /** Start a session: a sandbox kept across calls (POST /v1/sessions). End it with close(), or `await using`. */
    createSession(spec?: SessionSpec): Promise<Session>;
    /** A session made earlier, by its ID. */
    session(id: string): Promise<Session>;
    /** This token's sessions' records, running first. */
    sessions(): Promise<SessionInfo[]>;
    /** The tools as a model's definitions (GET /v1/tools): "openai" (Chat Completions' {type: "function", ...}), "anthropic" ({name, description, input_schema}) or "mcp". */
    tools(format?: "openai" | "anthropic" | "mcp"): Promise<Record<string, unknown>[]>;
    /**
     * Run one tool call as /mcp's tools/call would (POST /v1/tools/NAME). `call` is a tool's name (then `args` an
     * object, or a JSON string as OpenAI gives it), or a model's call as its API hands it over: OpenAI's tool call
     * ({id, type: "function", function: {name, arguments}}) or Anthropic's tool_use block ({type: "tool_use", id, name,
     * input}). A failing program is a result with isError, never a throw; toMessage() is the reply to hand the model
     * back, in the shape of the call.
     */
    callTool(call: string | ToolCall, args?: Record<string, unknown> | string): Promise<ToolResult>;
    /** @internal A JSON call; what the session objects use. */
    request(method: string, path: string, opts?: {
        query?: Record<string, string | undefined>;
        body?: unknown;
        waitMs?: number;
        headers?: Record<string, string>;
    }): Promise<{
        status: number;
        body: unknown;
    }>;
    /** @internal fetch with the token, a timeout, and retries; non-2xx answers throw. waitMs null: no timeout (streams). */
    open(method: string, path: string, opts: {
        query?: Record<string, string | undefined>;
        raw?: string | Uint8Array;
        headers?: Record<string, string>;
        contentType?: string;
        waitMs: number | null;
        signal?: AbortSignal;
    }): Promise<Response>;
}
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
export declare type CodeLanguage = "python" | "javascript" | "typescript" | "bash";
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
declare type Json = Record<string, unknown>;
/** A sandbox kept across calls. Made by Sandbox.createSession; `await using` (or close) ends it. */
export declare class Session {
    readonly sandbox: Sandbox;
    readonly id: string;
    info: SessionInfo;
    readonly files: Files;
    readonly processes: Processes;
    readonly ports: Ports;
    /** @internal */
    readonly path: string;
    constructor(sandbox: Sandbox, info: SessionInfo);
    /** Where `port` of the session is reached through the gateway (once exposed: ports.expose), with this client's token. */
    getUrl(port: number): string;
    /** @internal A call on the session: a mutating one with an Idempotency-Key, so that a retry runs once. */
    call(method: string, rel: string, body?: unknown, opts?: {
        waitMs?: number;
        query?: Record<string, string | undefined>;
    }): Promise<Json>;
    /** Run a command: a string goes to /bin/sh -c, an array is an argv. */
    exec(cmd: string | string[], opts?: ExecOptions): Promise<ExecResult>;
    /**
     * Run a cell in a stateful context of `language`: "python" (the default),
     * "javascript", "typescript" or "bash". The context defaults to "default"
     * for python and to the language's name for the others.
     */
    runCode(code: string, opts?: {
        language?: CodeLanguage;
        context?: string;
        timeoutMs?: number;
    }): Promise<CodeResult>;
    /** Its code contexts, by name. */
    contexts(): Promise<ContextInfo[]>;
    /**
     * Start a code context in `cwd` (default the session's directory):
     * `runCode(..., { context: name })` runs in it. A name taken already
     * rejects with SandfleetError "exists"; past 16 contexts,
     * "too_many_requests". Without a name it takes its language's default
     * name when free.
     */
    createContext(opts?: {
        language?: CodeLanguage;
        name?: string;
        cwd?: string;
    }): Promise<ContextInfo>;
    /** End a code context: its process is killed and its name is free. */
    deleteContext(name: string): Promise<void>;
    /**
     * Its recent code cells, oldest first, as its worker keeps them (the last
     * 20; an ended session's for 15 minutes). A read: the idle timeout goes
     * on, and a paused session is not resumed (`gone`).
     */
    cells(): Promise<CellList>;
    /** Count as a call: the idle timeout starts again. */
    keepalive(): Promise<SessionInfo>;
    /**
     * Replace the running session's egress policy, within the worker's caps:
     * a limits.network value (`{allow: [...]}`, or `"none"` to lock it after
     * the installs). The proxy applies it at once.
     */
    setNetwork(network: Json | string | boolean): Promise<SessionInfo>;
    /** The session's record as it is now. */
    refresh(): Promise<SessionInfo>;
    /** End the session; ending one that has ended already is no error. */
    close(): Promise<void>;
}
/** A session's files: paths are relative to /workspace, or under /tmp. */
export declare class Files {
    private readonly s;
    constructor(s: Session);
    read(path: string): Promise<Uint8Array>;
    readText(path: string): Promise<string>;
    write(path: string, data: string | Uint8Array, opts?: {
        mode?: number;
    }): Promise<Entry>;
    list(dir?: string): Promise<Entry[]>;
    remove(path: string, opts?: {
        recursive?: boolean;
    }): Promise<void>;
}
/** An exposed port: where it is reached; from expose, a preview token for it and when that expires. */
export interface PortInfo {
    port: number;
    url: string;
    token?: string;
    expires_at?: string;
}
/** A session's exposed ports: a server it runs on the sandbox's 127.0.0.1, reached through the gateway at Session.getUrl(port). */
export declare class Ports {
    private readonly s;
    constructor(s: Session);
    /**
     * Expose `port` (1024 to 65535). The answer's token is a preview token
     * good for this port alone until expires_at (ttlMs, default an hour),
     * which a request may carry instead of the owner's token
     * (X-Sandfleet-Preview-Token, or ?sandfleet_preview=). With waitMs the
     * call first waits that long at most for the server to accept a
     * connection (SandfleetError "timeout" if it does not).
     */
    expose(port: number, opts?: {
        ttlMs?: number;
        waitMs?: number;
    }): Promise<PortInfo>;
    /** The ports exposed. */
    list(): Promise<PortInfo[]>;
    /** Stop exposing `port`: its URL and preview tokens answer 404, and the connections open to it are closed. */
    unexpose(port: number): Promise<void>;
}
/** A session's background processes (started with exec(..., { background: true })). */
export declare class Processes {
    private readonly s;
    constructor(s: Session);
    list(): Promise<ProcessInfo[]>;
    /** Its output from offset since; with waitMs, after waiting that long at most for it to end. */
    output(pid: number, opts?: {
        since?: number;
        waitMs?: number;
    }): Promise<ProcessOutput>;
    signal(pid: number, signal?: number): Promise<void>;
    stdin(pid: number, data: string | Uint8Array, opts?: {
        eof?: boolean;
    }): Promise<void>;
}
/** The seed's result shape. */
export interface SandboxResult {
    success: boolean;
    output: string;
    exitCode: number;
}
/**
 * The seed's DockerSandbox, running on the fleet instead of a local Docker
 * engine, with the seed's limits (512 MiB, 1 CPU, no network, read-only
 * root with a 64 MiB /tmp). execute never rejects: a failure to reach the
 * fleet is { success: false, output: "Sandbox error: ...", exitCode: -1 }.
 */
export declare class DockerSandbox {
    private image;
    private readonly client;
    constructor(image?: string, options?: SandboxOptions);
    execute(code: string): Promise<SandboxResult>;
}
/** A model's tool call: OpenAI's (function.arguments a JSON string) or Anthropic's tool_use block (input an object). */
export declare type ToolCall = {
    id?: string;
    type?: "function";
    function: {
        name: string;
        arguments: string;
    };
} | {
    type: "tool_use";
    id: string;
    name: string;
    input: Record<string, unknown>;
};
/** One part of a tool's result, as MCP gives it. */
export interface ToolContent {
    type: string;
    text?: string;
    data?: string;
    mimeType?: string;
    [key: string]: unknown;
}
declare type ToolShape = "" | "openai" | "anthropic";
/** A tool call's result: MCP's content parts (text, image) and isError. */
export declare class ToolResult {
    readonly shape: ToolShape;
    readonly callId: string;
    readonly content: ToolContent[];
    readonly isError: boolean;
    constructor(raw: {
        content?: ToolContent[];
        isError?: boolean;
    }, shape?: ToolShape, callId?: string);
    /** The text parts, joined: what a text-only model reads. */
    get text(): string;
    /** A Chat Completions tool message. Its content is text only (the API takes no images there): an image is named. */
    toOpenAI(toolCallId?: string): {
        role: "tool";
        tool_call_id: string;
        content: string;
    };
    /** A Messages API tool_result block, images as image blocks. */
    toAnthropic(toolUseId?: string): {
        type: "tool_result";
        tool_use_id: string;
        content: Record<string, unknown>[];
        is_error: boolean;
    };
    /** The reply in the shape of the call it answers. */
    toMessage(): Record<string, unknown>;
}
export {};
