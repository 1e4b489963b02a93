# An agent's session over HTTP (SANDFLEET_URL, SANDFLEET_TOKEN): state kept
# across cells, a file written by a cell and read by a command, a server
# started in the background and asked from a later call, a cell that raises
# keeping its context. At least 30 calls; prints one JSON line of what came
# back.
import json

from sandfleet import Sandbox, SandfleetError

sb = Sandbox()
seen = {"calls": 0}


def note(key, value):
    seen["calls"] += 1
    seen.setdefault(key, value)
    return value


with sb.create_session(idle_timeout=120) as s:
    note("created", s.info["status"])
    note("first_reset", s.run_code("import json\nrows = []").reset)
    for i in range(12):
        r = s.run_code(f"rows.append({i * i})\nlen(rows)")
        seen["calls"] += 1
        seen["last_len"] = r.text
    r = s.run_code("json.dump(rows, open('rows.json', 'w'))\nrows[99]")
    note("error", r.error.name if r.error else None)
    note("after_error", s.run_code("sum(rows)").text)
    note("command", s.exec("python3 -c 'import json; print(max(json.load(open(\"rows.json\"))))'").stdout.strip())
    note("exit_code", s.exec(["sh", "-c", "exit 5"]).exit_code)
    s.files.write("site/hello.txt", "hi from the session\n")
    seen["calls"] += 1
    server = s.exec(["python3", "-m", "http.server", "8001", "--bind", "127.0.0.1", "--directory", "site"], background=True)
    seen["calls"] += 1
    fetch = (
        "import urllib.request, time\n"
        "for _ in range(200):\n"
        "    try:\n"
        "        print(urllib.request.urlopen('http://127.0.0.1:8001/hello.txt').read().decode(), end=''); break\n"
        "    except OSError:\n"
        "        time.sleep(0.05)\n"
    )
    note("served", s.exec(["python3", "-c", fetch]).stdout)
    note("processes", [p["running"] for p in s.processes.list()])
    s.processes.signal(server.pid)
    seen["calls"] += 1
    note("server_log", "GET /hello.txt" in s.processes.output(server.pid, wait=10)["output"])
    note("files", sorted(e["name"] for e in s.files.list()))
    note("read", s.files.read("rows.json").decode())
    while seen["calls"] < 30:
        s.run_code("rows.append(0)")
        seen["calls"] += 1
    sid = s.id
try:
    sb.session(sid).exec("true")
except SandfleetError as e:
    seen["after_close"] = e.code
print(json.dumps(seen, sort_keys=True))
