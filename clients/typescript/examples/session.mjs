// An agent's session over HTTP (SANDFLEET_URL, SANDFLEET_TOKEN), as
// examples/session.py in Python: state kept across cells, a file written by
// a cell and read by a command, a server started in the background and asked
// from a later call, a cell that raises keeping its context. At least 30
// calls; prints one JSON line of what came back.
import { Sandbox, SandfleetError } from "../dist/index.js";

const sb = new Sandbox();
const seen = { calls: 0 };
const note = (key, value) => {
  seen.calls++;
  if (!(key in seen)) seen[key] = value;
  return value;
};

const s = await sb.createSession({ idleTimeoutMs: 120_000 });
try {
  note("created", s.info.status);
  note("first_reset", (await s.runCode("import json\nrows = []")).reset);
  for (let i = 0; i < 12; i++) {
    const r = await s.runCode(`rows.append(${i * i})\nlen(rows)`);
    seen.calls++;
    seen.last_len = r.text;
  }
  const r = await s.runCode("json.dump(rows, open('rows.json', 'w'))\nrows[99]");
  note("error", r.error?.name ?? null);
  note("after_error", (await s.runCode("sum(rows)")).text);
  note("command", (await s.exec(`python3 -c 'import json; print(max(json.load(open("rows.json"))))'`)).stdout.trim());
  note("exit_code", (await s.exec(["sh", "-c", "exit 5"])).exitCode);
  await s.files.write("site/hello.txt", "hi from the session\n");
  seen.calls++;
  const server = await s.exec(["python3", "-m", "http.server", "8001", "--bind", "127.0.0.1", "--directory", "site"], { background: true });
  seen.calls++;
  const fetch = [
    "import urllib.request, time",
    "for _ in range(200):",
    "    try:",
    "        print(urllib.request.urlopen('http://127.0.0.1:8001/hello.txt').read().decode(), end=''); break",
    "    except OSError:",
    "        time.sleep(0.05)",
  ].join("\n");
  note("served", (await s.exec(["python3", "-c", fetch])).stdout);
  note("processes", (await s.processes.list()).map((p) => p.running));
  await s.processes.signal(server.pid);
  seen.calls++;
  note("server_log", (await s.processes.output(server.pid, { waitMs: 10_000 })).output.includes("GET /hello.txt"));
  note("files", (await s.files.list()).map((e) => e.name).sort());
  note("read", await s.files.readText("rows.json"));
  while (seen.calls < 30) {
    await s.runCode("rows.append(0)");
    seen.calls++;
  }
} finally {
  await s.close(); // or: await using s = await sb.createSession(...)
}
try {
  await (await sb.session(s.id)).exec("true");
} catch (e) {
  if (e instanceof SandfleetError) seen.after_close = e.code;
  else throw e;
}
console.log(JSON.stringify(seen));
