// Unit tests of the session object against a fake gateway: node --test test/
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { Sandbox, Session, SandfleetError } from "../dist/index.js";

const INFO = { id: "s-1", status: "running", worker: "w", image: "python", limits: {}, idle_timeout: "5m0s", max_lifetime: "1h0m0s",
  created_at: "", active_at: "", expires_at: "" };

let script = new Map(); // "METHOD /path" → [[status, headers, body], ...]
let seen = [];
let server, url;

before(async () => {
  server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const path = req.url.split("?")[0];
      seen.push({ method: req.method, url: req.url, key: req.headers["idempotency-key"], type: req.headers["content-type"], body: Buffer.concat(chunks) });
      const q = script.get(`${req.method} ${path}`) ?? [[404, {}, { error: { code: "not_found", message: "no" } }]];
      const [status, headers, out] = q.length > 1 ? q.shift() : q[0];
      const data = Buffer.isBuffer(out) ? out : JSON.stringify(out);
      res.writeHead(status, { "Content-Type": Buffer.isBuffer(out) ? "application/octet-stream" : "application/json", ...headers });
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

test("a session object: exec, runCode, cells, files and processes; mutating calls carry an Idempotency-Key, kept across a retry", async () => {
  const busy = { error: { code: "too_many_requests", message: "busy" } };
  reset({
    "POST /v1/sessions": [[201, {}, INFO]],
    "POST /v1/sessions/s-1/exec": [[429, { "Retry-After": "0" }, busy],
      [200, {}, { exit_code: 3, stdout: "aGk=", stdout_encoding: "base64", stderr: "", duration_ms: 7 }],
      [200, {}, { exit_code: 1, stdout: "3 failed\n", stderr: "", duration_ms: 5, exclusive: true, ended: 2 }]],
    "POST /v1/sessions/s-1/code": [[200, {}, { text: "2", stdout: "", stderr: "", reset: true, error: { name: "E", value: "v", traceback: "t" } }]],
    "PUT /v1/sessions/s-1/files/a%20b/c.txt": [[200, {}, { name: "c.txt", path: "/workspace/a b/c.txt", type: "file", size: 2, mode: 420, mtime_ms: 1 }]],
    "GET /v1/sessions/s-1/files/a%20b/c.txt": [[200, {}, Buffer.from([0, 255])]],
    "GET /v1/sessions/s-1/files": [[200, {}, { entries: [{ name: "a b", type: "dir" }] }]],
    "GET /v1/sessions/s-1/cells": [[200, {}, { cells: [{ seq: 1, at: "", duration_ms: 3, code: "1+1", text: "2" }], dropped: 4 }]],
    "GET /v1/sessions/s-1/processes": [[200, {}, { processes: [{ pid: 9, cmd: ["sleep"], running: true, output_bytes: 0 }] }]],
    "GET /v1/sessions/s-1/processes/9": [[200, {}, { pid: 9, running: false, output: "b2s=", output_encoding: "base64", next: 2 }]],
    "POST /v1/sessions/s-1/processes/9/signal": [[200, {}, {}]],
    "DELETE /v1/sessions/s-1": [[200, {}, { ...INFO, status: "ended" }], [410, {}, { error: { code: "gone", message: "ended" } }]],
  });
  const sb = new Sandbox({ url, backoffMs: 1 });
  const s = await sb.createSession({ idleTimeoutMs: 90_000, env: { A: "1" } });
  assert.ok(s instanceof Session);
  assert.equal(s.id, "s-1");
  assert.deepEqual(JSON.parse(seen[0].body), { image: "python", env: { A: "1" }, idle_timeout: "90s" });
  assert.ok(seen[0].key);

  const r = await s.exec(["sh", "-c", "exit 3"], { timeoutMs: 1500 });
  assert.deepEqual([r.exitCode, r.stdout, r.durationMs], [3, "hi", 7]);
  const execs = seen.filter((x) => x.url === "/v1/sessions/s-1/exec");
  assert.equal(execs.length, 2);
  assert.ok(execs[0].key && execs[0].key === execs[1].key, "a retry sends the same Idempotency-Key");
  assert.deepEqual(JSON.parse(execs[0].body), { cmd: ["sh", "-c", "exit 3"], timeout: "1.5s" });
  assert.deepEqual([r.exclusive, r.ended], [false, 0]);
  const v = await s.exec("pytest -q", { exclusive: true });
  assert.deepEqual([v.exitCode, v.stdout, v.exclusive, v.ended], [1, "3 failed\n", true, 2]);
  assert.deepEqual(JSON.parse(seen.at(-1).body), { shell: "pytest -q", exclusive: true });

  const c = await s.runCode("1+1", { context: "k" });
  assert.deepEqual([c.text, c.reset, c.error.name], ["2", true, "E"]);

  const e = await s.files.write("a b/c.txt", new Uint8Array([0, 255]), { mode: 0o600 });
  assert.equal(e.size, 2);
  const put = seen.at(-1);
  assert.equal(put.url, "/v1/sessions/s-1/files/a%20b/c.txt?mode=600");
  assert.equal(put.type, "application/octet-stream");
  assert.deepEqual([...put.body], [0, 255]);
  assert.ok(put.key);
  assert.deepEqual([...(await s.files.read("a b/c.txt"))], [0, 255]);
  assert.equal(seen.at(-1).key, undefined, "a read sends no Idempotency-Key");
  assert.deepEqual((await s.files.list()).map((x) => x.name), ["a b"]);
  assert.equal(seen.at(-1).url, "/v1/sessions/s-1/files?dir=.");

  const h = await s.cells();
  assert.deepEqual([h.cells[0].code, h.cells[0].text, h.dropped], ["1+1", "2", 4]);
  assert.equal(seen.at(-1).key, undefined, "a read of the cells sends no Idempotency-Key");

  assert.equal((await s.processes.list())[0].pid, 9);
  const out = await s.processes.output(9, { waitMs: 2000 });
  assert.deepEqual([out.output, out.next], ["ok", 2]);
  assert.equal(seen.at(-1).url, "/v1/sessions/s-1/processes/9?since=0&wait=2s");
  await s.processes.signal(9);
  assert.deepEqual(JSON.parse(seen.at(-1).body), { signal: 15 });

  await s.close();
  assert.equal(s.info.status, "ended");
  await s.close(); // 410: no error
  if (Symbol.asyncDispose) {
    await s[Symbol.asyncDispose]();
    assert.equal(seen.at(-1).method, "DELETE");
  }
});

test("a session's contexts: created in a directory, listed, ended; a name taken is exists", async () => {
  const sh = { name: "sh", language: "bash", cwd: "/workspace/src", cells: 0, created_ms: 1 };
  reset({
    "GET /v1/sessions/s-1": [[200, {}, INFO]],
    "POST /v1/sessions/s-1/contexts": [[201, {}, sh], [409, {}, { error: { code: "exists", message: "taken" } }]],
    "GET /v1/sessions/s-1/contexts": [[200, {}, { contexts: [sh] }]],
    "DELETE /v1/sessions/s-1/contexts/sh": [[204, {}, Buffer.alloc(0)]],
  });
  const s = await new Sandbox({ url, backoffMs: 1 }).session("s-1");
  assert.deepEqual(await s.createContext({ language: "bash", name: "sh", cwd: "src" }), sh);
  assert.deepEqual(JSON.parse(seen.at(-1).body), { language: "bash", name: "sh", cwd: "src" });
  await assert.rejects(s.createContext({ language: "bash", name: "sh" }), (e) => e instanceof SandfleetError && e.code === "exists" && e.status === 409);
  assert.deepEqual(await s.contexts(), [sh]);
  await s.deleteContext("sh");
  assert.equal(`${seen.at(-1).method} ${seen.at(-1).url}`, "DELETE /v1/sessions/s-1/contexts/sh");
});

test("a session's ports: exposed with a ttl and a wait, listed, its URL, unexposed", async () => {
  const portURL = `${url}/v1/sessions/s-1/ports/3000/`;
  const exposed = { port: 3000, url: portURL, token: "t.s", expires_at: "2026-12-07T02:00:00Z" };
  reset({
    "GET /v1/sessions/s-1": [[200, {}, INFO]],
    "POST /v1/sessions/s-1/ports": [[201, {}, exposed]],
    "GET /v1/sessions/s-1/ports": [[200, {}, { ports: [{ port: 3000, url: portURL }] }]],
    "DELETE /v1/sessions/s-1/ports/3000": [[204, {}, Buffer.alloc(0)]],
  });
  const s = await new Sandbox({ url, backoffMs: 1 }).session("s-1");
  assert.deepEqual(await s.ports.expose(3000, { ttlMs: 600_000, waitMs: 5000 }), exposed);
  assert.deepEqual(JSON.parse(seen.at(-1).body), { port: 3000, ttl: "600s", wait: "5s" });
  assert.ok(seen.at(-1).key, "an expose carries an Idempotency-Key");
  assert.deepEqual(await s.ports.list(), [{ port: 3000, url: portURL }]);
  assert.equal(s.getUrl(3000), portURL);
  await s.ports.unexpose(3000);
  assert.equal(`${seen.at(-1).method} ${seen.at(-1).url}`, "DELETE /v1/sessions/s-1/ports/3000");
});

test("a session's errors carry the server's code", async () => {
  reset({ "GET /v1/sessions/nope": [[404, {}, { error: { code: "not_found", message: "no session" } }]] });
  const sb = new Sandbox({ url, backoffMs: 1 });
  await assert.rejects(sb.session("nope"), (e) => e instanceof SandfleetError && e.code === "not_found" && e.status === 404);
});
