// Unit tests of the client against a fake gateway: node --test test/
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { createHash } from "node:crypto";
import { Sandbox, DockerSandbox, SandfleetError, newId } from "../dist/index.js";

const RESULT = {
  id: "", status: "succeeded", exit_code: 0, stdout: "hi\n", stderr: "", stdout_truncated: false, stderr_truncated: false,
  duration_ms: 5, cpu_ms: 1, peak_memory_bytes: 1, worker: "w", attempt: 1, queued_at: null, started_at: null, finished_at: null,
};

let script = new Map(); // "METHOD /path" → [[status, headers, body], ...]
let seen = [];
let server, url;

before(async () => {
  server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const path = req.url.split("?")[0];
      seen.push({ method: req.method, url: req.url, auth: req.headers.authorization, body });
      const q = script.get(`${req.method} ${path}`) ?? [[404, {}, { error: { code: "not_found", message: "no" } }]];
      const [status, headers, out] = q.length > 1 ? q.shift() : q[0];
      const data = typeof out === "string" ? out : JSON.stringify(out);
      res.writeHead(status, { "Content-Type": "application/json", ...headers });
      res.end(data);
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${server.address().port}`;
});
after(() => server.close());

function reset(entries) {
  script = new Map(Object.entries(entries));
  seen = [];
}

test("run retries 429 with the same id, and sends the token", async () => {
  const full = { error: { code: "queue_full", message: "full" } };
  reset({ "POST /v1/jobs": [[429, { "Retry-After": "0" }, full], [429, {}, full], [200, {}, RESULT]] });
  const sb = new Sandbox({ url, token: "sft_x", backoffMs: 5 });
  const r = await sb.run("print('hi')", { limits: { timeout: "5s" } });
  assert.equal(r.stdout, "hi\n");
  assert.equal(seen.length, 3);
  assert.equal(new Set(seen.map((s) => JSON.parse(s.body).id)).size, 1);
  assert.equal(seen[0].auth, "Bearer sft_x");
  assert.deepEqual(JSON.parse(seen[0].body).limits, { timeout: "5s" });
});

test("errors carry the server's code and are not retried", async () => {
  reset({ "POST /v1/jobs": [[400, {}, { error: { code: "invalid_job", message: "image: missing" } }]] });
  const sb = new Sandbox({ url, backoffMs: 5 });
  await assert.rejects(sb.run("x"), (e) => e instanceof SandfleetError && e.code === "invalid_job" && e.status === 400);
  assert.equal(seen.length, 1);
});

test("202, then long polls until the result", async () => {
  reset({
    "POST /v1/jobs": [[202, { Location: "/v1/jobs/j1" }, { id: "j1", status: "queued" }]],
    "GET /v1/jobs/j1": [[202, {}, { id: "j1", status: "running" }], [200, {}, { ...RESULT, id: "j1" }]],
    "GET /v1/jobs/j2": [[202, {}, { id: "j2", status: "running" }]],
  });
  const sb = new Sandbox({ url });
  assert.equal((await sb.run("x")).id, "j1");
  assert.match(seen.at(-1).url, /wait=/);
  await assert.rejects(sb.wait("j2", 200), (e) => e.code === "timeout");
  assert.equal(await sb.get("j2"), null);
});

test("DockerSandbox has the seed's shape and never rejects", async () => {
  reset({
    "POST /v1/jobs": [
      [200, {}, { ...RESULT, stderr: "warn\n" }],
      [200, {}, { ...RESULT, status: "timeout", exit_code: null, stdout: "partial\n", error: "killed at 30s" }],
    ],
  });
  const sb = new DockerSandbox(undefined, { url });
  assert.deepEqual(await sb.execute("print('hi')"), { success: true, output: "hi\nwarn\n", exitCode: 0 });
  const job = JSON.parse(seen[0].body);
  assert.equal(job.image, "python");
  assert.deepEqual(job.limits, { memory: "512m", cpus: 1, network: false, tmpfs: "64m" });
  const t = await sb.execute("while True: pass");
  assert.equal(t.exitCode, 124);
  assert.equal(t.success, false);
  assert.match(t.output, /timeout: killed at 30s/);
  const down = await new DockerSandbox(undefined, { url: "http://127.0.0.1:9", retries: 1, backoffMs: 5 }).execute("print(1)");
  assert.equal(down.exitCode, -1);
  assert.match(down.output, /^Sandbox error: unreachable/);
});

test("stream falls back to the result without live output", async () => {
  reset({
    "POST /v1/jobs": [[202, {}, { id: "s1", status: "queued" }]],
    "GET /v1/jobs/s1/events": [[501, {}, { error: { code: "not_implemented", message: "later" } }]],
    "GET /v1/jobs/s1": [[200, {}, { ...RESULT, id: "s1", stderr: "e\n" }]],
  });
  const gen = new Sandbox({ url }).stream("print('hi')");
  const out = [];
  let next;
  while (!(next = await gen.next()).done) out.push(next.value);
  assert.deepEqual(out, [{ stream: "stdout", text: "hi\n" }, { stream: "stderr", text: "e\n" }]);
  assert.equal(next.value.id, "s1");
});

test("batch yields lines and returns the summary", async () => {
  const lines = [
    { line: 2, error: { code: "invalid_job", message: "bad" } },
    { line: 1, result: { ...RESULT, id: "b-1" }, reused: true },
    { summary: { total: 1, done: 1 } },
  ];
  reset({ "POST /v1/batches": [[200, { "Content-Type": "application/x-ndjson" }, lines.map((l) => JSON.stringify(l)).join("\n") + "\n"]] });
  const gen = new Sandbox({ url }).batch([{ image: "python", code: "print(1)" }, {}], { name: "n" });
  const items = [];
  let next;
  while (!(next = await gen.next()).done) items.push(next.value);
  assert.deepEqual(items.map((i) => [i.line, i.error?.code ?? i.result.id]), [[2, "invalid_job"], [1, "b-1"]]);
  assert.equal(next.value.done, 1);
  assert.match(seen[0].url, /name=n/);
});

test("ids are UUIDv7", async () => {
  const id = await newId();
  assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
});

test("a download the gateway cuts is SandfleetError short_download", async () => {
  const cut = http.createServer((req, res) => {
    res.writeHead(200, { "Content-Type": "application/octet-stream", "Content-Length": "100" });
    res.write("x".repeat(40));
    setTimeout(() => res.socket.destroy(), 20); // cut short, as the gateway's abort is
  });
  await new Promise((r) => cut.listen(0, "127.0.0.1", r));
  try {
    const sb = new Sandbox({ url: `http://127.0.0.1:${cut.address().port}`, backoffMs: 1, retries: 0 });
    await assert.rejects(sb.artifact("j1", "a.bin"), (e) => e instanceof SandfleetError && e.code === "short_download");
  } finally {
    cut.close();
  }
});

test("a download failing its X-Sandfleet-Sha256 is SandfleetError digest_mismatch", async () => {
  const good = createHash("sha256").update("x".repeat(40)).digest("hex");
  let n = 0;
  const srv = http.createServer((req, res) => {
    res.writeHead(200, { "Content-Type": "application/octet-stream", "Content-Length": "40", "X-Sandfleet-Sha256": good });
    res.end((n++ === 0 ? "x" : "y").repeat(40));
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  try {
    const sb = new Sandbox({ url: `http://127.0.0.1:${srv.address().port}`, backoffMs: 1, retries: 0 });
    assert.equal(new TextDecoder().decode(await sb.artifact("j1", "a.bin")), "x".repeat(40));
    await assert.rejects(sb.artifact("j1", "a.bin"), (e) => e instanceof SandfleetError && e.code === "digest_mismatch");
  } finally {
    srv.close();
  }
});

test("breaking out of stream() closes the event stream", async () => {
  let closed = false;
  const srv = http.createServer((req, res) => {
    if (req.method === "POST") {
      res.writeHead(202, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ id: "s1", status: "queued" }));
      return;
    }
    res.writeHead(200, { "Content-Type": "text/event-stream" });
    res.write('event: stdout\nid: 1\ndata: {"type":"output","text":"step 1\\n"}\n\n');
    res.on("close", () => (closed = true));
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  try {
    const sb = new Sandbox({ url: `http://127.0.0.1:${srv.address().port}`, retries: 0 });
    for await (const o of sb.stream("print(1)")) {
      assert.equal(o.text, "step 1\n");
      break;
    }
    const until = Date.now() + 3000;
    while (!closed && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    assert.ok(closed, "the event stream's connection is still open 3 s after the caller broke out of the loop");
  } finally {
    srv.closeAllConnections();
    srv.close();
  }
});

test("stream's timeoutMs ends a silent stream with a timeout error", async () => {
  const silent = http.createServer((req, res) => {
    if (req.method === "POST") {
      res.writeHead(202, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ id: "s1", status: "queued" }));
      return;
    }
    res.writeHead(200, { "Content-Type": "text/event-stream" });
    res.write('event: queued\ndata: {"type":"queued","id":"s1"}\n\n'); // then nothing: a job that stays queued
  });
  await new Promise((r) => silent.listen(0, "127.0.0.1", r));
  try {
    const sb = new Sandbox({ url: `http://127.0.0.1:${silent.address().port}`, backoffMs: 1, retries: 0 });
    const start = Date.now();
    await assert.rejects(
      (async () => {
        for await (const _ of sb.stream("print(1)", { timeoutMs: 500 })) void _;
      })(),
      (e) => e instanceof SandfleetError && e.code === "timeout",
    );
    assert.ok(Date.now() - start < 5000, `took ${Date.now() - start} ms`);
  } finally {
    silent.closeAllConnections();
    silent.close();
  }
});

test("callTool answers each shape of a model's call in its own shape", async () => {
  const png = { type: "image", mimeType: "image/png", data: "iVBORw0KGgo=" };
  reset({ "POST /v1/tools/run_code": [[200, {}, { content: [{ type: "text", text: "exit 0\n42" }, png] }]] });
  const sb = new Sandbox({ url, token: "sft_x", backoffMs: 1 });
  const openai = await sb.callTool({
    id: "call_1", type: "function",
    function: { name: "run_code", arguments: '{"language": "python", "code": "print(42)"}' },
  });
  const m = openai.toMessage();
  assert.equal(m.role, "tool");
  assert.equal(m.tool_call_id, "call_1");
  assert.match(m.content, /42/);
  assert.match(m.content, /image\/png/);
  const anthropic = await sb.callTool({ type: "tool_use", id: "toolu_1", name: "run_code", input: { language: "python", code: "print(42)" } });
  const b = anthropic.toMessage();
  assert.deepEqual([b.type, b.tool_use_id, b.is_error], ["tool_result", "toolu_1", false]);
  assert.deepEqual(b.content[0], { type: "text", text: "exit 0\n42" });
  assert.equal(b.content[1].source.media_type, "image/png");
  const bodies = seen.filter((s) => s.url === "/v1/tools/run_code").map((s) => JSON.parse(s.body));
  assert.deepEqual(bodies, [{ language: "python", code: "print(42)" }, { language: "python", code: "print(42)" }]);

  reset({ "POST /v1/tools/run_code": [[200, {}, { content: [{ type: "text", text: "exit 3" }], isError: true }]] });
  const failed = await sb.callTool("run_code", { language: "python", code: "exit(3)" });
  assert.equal(failed.isError, true);
  assert.equal(failed.toAnthropic("t").is_error, true);
  await assert.rejects(sb.callTool({ name: "run_code" }), SandfleetError);

  // Arguments a model got wrong are a result it can correct, not a throw that ends the loop: not JSON is told at
  // once, the rest goes to the server, whose schema says what is wrong.
  const sent = seen.length;
  const bad = await sb.callTool({ id: "call_2", type: "function", function: { name: "run_code", arguments: '{"code": "print(1)"' } });
  assert.equal(bad.isError, true);
  assert.deepEqual([bad.toMessage().role, bad.toMessage().tool_call_id], ["tool", "call_2"]);
  assert.match(bad.toMessage().content, /not JSON/);
  assert.equal(seen.length, sent, "nothing sent for arguments that are not JSON");
  reset({ "POST /v1/tools/run_code": [[200, {}, { content: [{ type: "text", text: "must be an object" }], isError: true }]] });
  const notObject = await sb.callTool({ id: "call_3", type: "function", function: { name: "run_code", arguments: "[1, 2]" } });
  assert.equal(notObject.isError, true);
  assert.deepEqual(JSON.parse(seen.at(-1).body), [1, 2]);

  reset({ "GET /v1/tools": [[200, {}, { format: "anthropic", tools: [{ name: "run_code" }] }]] });
  assert.deepEqual(await sb.tools("anthropic"), [{ name: "run_code" }]);
  assert.match(seen.at(-1).url, /\?format=anthropic$/);
});
