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
    private request;
    /** fetch with the token, a timeout, and retries; non-2xx answers throw. waitMs null: no timeout (streams). */
    private open;
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
