"""Unit tests of the client against a fake gateway (python3 -m unittest)."""

import hashlib
import json
import os
import sys
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import sandfleet  # noqa: E402

RESULT = {"id": "", "status": "succeeded", "exit_code": 0, "stdout": "hi\n", "stderr": "", "stdout_truncated": False,
          "stderr_truncated": False, "duration_ms": 5, "cpu_ms": 1, "peak_memory_bytes": 1, "worker": "w",
          "attempt": 1, "queued_at": None, "started_at": None, "finished_at": None}


class Fake(BaseHTTPRequestHandler):
    """Answers from the class's script: a list of (status, headers, body) per path."""

    script = {}
    seen = []
    release = threading.Event()

    def log_message(self, *args):
        pass

    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        path = self.path.split("?")[0]
        Fake.seen.append((self.command, self.path, self.headers.get("Authorization"), body))
        queue = Fake.script.get((self.command, path)) or [(404, {}, {"error": {"code": "not_found", "message": "no"}})]
        status, headers, out = queue.pop(0) if len(queue) > 1 else queue[0]
        data = out if isinstance(out, bytes) else json.dumps(out).encode()
        if data == b"HOLD":  # an event stream of a job that stays silent
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b'event: queued\ndata: {"type":"queued","id":"s1"}\n\n')
            self.wfile.flush()
            Fake.release.wait(10)
            return
        if data == b"TRICKLE":  # an event stream whose output comes slowly
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i in range(5):
                time.sleep(0.8 if i == 0 else 1.5)
                self.wfile.write(b'event: stdout\ndata: {"type":"output","text":"x"}\n\n')
                self.wfile.flush()
                if Fake.release.is_set():
                    return
            return
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        if "Content-Length" in headers:  # more than data: cut short, as the gateway does
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
            self.close_connection = True
            return
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = answer


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = ThreadingHTTPServer(("127.0.0.1", 0), Fake)
        threading.Thread(target=cls.srv.serve_forever, daemon=True).start()
        cls.url = "http://127.0.0.1:%d" % cls.srv.server_address[1]

    @classmethod
    def tearDownClass(cls):
        cls.srv.shutdown()

    def setUp(self):
        Fake.script, Fake.seen = {}, []
        self.sb = sandfleet.Sandbox(self.url, token="sft_x", backoff=0.01)

    def test_run_retries_429_with_the_same_id(self):
        full = {"error": {"code": "queue_full", "message": "full"}}
        Fake.script[("POST", "/v1/jobs")] = [(429, {"Retry-After": "0"}, full), (429, {}, full), (200, {}, RESULT)]
        r = self.sb.run("print('hi')", limits={"timeout": "5s"})
        self.assertEqual((r.status, r.stdout, r.exit_code, r.success), ("succeeded", "hi\n", 0, True))
        ids = {json.loads(b)["id"] for _, _, _, b in Fake.seen}
        self.assertEqual(len(Fake.seen), 3)
        self.assertEqual(len(ids), 1, "a retried submit must keep its id")
        self.assertEqual(Fake.seen[0][2], "Bearer sft_x")
        job = json.loads(Fake.seen[0][3])
        self.assertEqual((job["image"], job["code"], job["limits"]), ("python", "print('hi')", {"timeout": "5s"}))

    def test_session_cells(self):
        info = {"id": "s-1", "status": "running"}
        cells = {"cells": [{"seq": 1, "at": "2026-12-03T13:40:09Z", "duration_ms": 3, "code": "1+1", "text": "2"}], "dropped": 4}
        Fake.script[("GET", "/v1/sessions/s-1")] = [(200, {}, info)]
        Fake.script[("GET", "/v1/sessions/s-1/cells")] = [(200, {}, cells)]
        got = self.sb.session("s-1").cells()
        self.assertEqual((got["cells"][0]["code"], got["cells"][0]["text"], got["dropped"]), ("1+1", "2", 4))
        self.assertEqual(Fake.seen[-1][:2], ("GET", "/v1/sessions/s-1/cells"))
        Fake.script[("GET", "/v1/sessions/s-1/cells")] = [(410, {}, {"error": {"code": "gone", "message": "none kept"}})]
        with self.assertRaises(sandfleet.SandfleetError) as cm:
            self.sb.session("s-1").cells()
        self.assertEqual(cm.exception.code, "gone")

    def test_session_contexts(self):
        Fake.script[("GET", "/v1/sessions/s-1")] = [(200, {}, {"id": "s-1", "status": "running"})]
        sh = {"name": "sh", "language": "bash", "cwd": "/workspace/src", "cells": 0, "created_ms": 1}
        Fake.script[("POST", "/v1/sessions/s-1/contexts")] = [
            (201, {}, sh), (409, {}, {"error": {"code": "exists", "message": "context \"sh\" exists already"}})]
        Fake.script[("GET", "/v1/sessions/s-1/contexts")] = [(200, {}, {"contexts": [sh]})]
        Fake.script[("DELETE", "/v1/sessions/s-1/contexts/sh")] = [(204, {}, b"")]
        s = self.sb.session("s-1")
        self.assertEqual(s.create_context("bash", name="sh", cwd="src"), sh)
        self.assertEqual(json.loads(Fake.seen[-1][3]), {"language": "bash", "name": "sh", "cwd": "src"})
        with self.assertRaises(sandfleet.SandfleetError) as cm:
            s.create_context("bash", name="sh")
        self.assertEqual(cm.exception.code, "exists")
        self.assertEqual(s.contexts(), [sh])
        s.delete_context("sh")
        self.assertEqual(Fake.seen[-1][:2], ("DELETE", "/v1/sessions/s-1/contexts/sh"))

    def test_session_ports(self):
        Fake.script[("GET", "/v1/sessions/s-1")] = [(200, {}, {"id": "s-1", "status": "running"})]
        url = self.url + "/v1/sessions/s-1/ports/3000/"
        exposed = {"port": 3000, "url": url, "token": "t.s", "expires_at": "2026-12-07T02:00:00Z"}
        Fake.script[("POST", "/v1/sessions/s-1/ports")] = [(201, {}, exposed)]
        Fake.script[("GET", "/v1/sessions/s-1/ports")] = [(200, {}, {"ports": [{"port": 3000, "url": url}]})]
        Fake.script[("DELETE", "/v1/sessions/s-1/ports/3000")] = [(204, {}, b"")]
        s = self.sb.session("s-1")
        self.assertEqual(s.ports.expose(3000, ttl=600, wait=5), exposed)
        self.assertEqual(json.loads(Fake.seen[-1][3]), {"port": 3000, "ttl": "600s", "wait": "5s"})
        self.assertEqual(s.ports.list(), [{"port": 3000, "url": url}])
        self.assertEqual(s.ports(), s.ports.list())
        self.assertEqual(s.get_url(3000), url)
        s.ports.unexpose(3000)
        self.assertEqual(Fake.seen[-1][:2], ("DELETE", "/v1/sessions/s-1/ports/3000"))

    def test_session_exclusive_exec(self):
        Fake.script[("GET", "/v1/sessions/s-1")] = [(200, {}, {"id": "s-1", "status": "running"})]
        Fake.script[("POST", "/v1/sessions/s-1/exec")] = [(200, {}, {"exit_code": 1, "stdout": "3 failed\n", "stderr": "",
                                                                      "duration_ms": 5, "exclusive": True, "ended": 2})]
        r = self.sb.session("s-1").exec("pytest -q", exclusive=True)
        self.assertEqual((r.exit_code, r.stdout, r.exclusive, r.ended), (1, "3 failed\n", True, 2))
        self.assertEqual(json.loads(Fake.seen[-1][3]), {"shell": "pytest -q", "exclusive": True})

    def test_error_carries_the_code(self):
        Fake.script[("POST", "/v1/jobs")] = [(400, {}, {"error": {"code": "invalid_job", "message": "image: missing"}})]
        with self.assertRaises(sandfleet.SandfleetError) as cm:
            self.sb.run("x")
        self.assertEqual((cm.exception.code, cm.exception.status), ("invalid_job", 400))
        self.assertEqual(len(Fake.seen), 1, "a 400 is not retried")

    def test_gives_up_after_retries(self):
        Fake.script[("GET", "/v1/status")] = [(503, {}, {"error": {"code": "unavailable", "message": "down"}})]
        sb = sandfleet.Sandbox(self.url, retries=2, backoff=0.01)
        with self.assertRaises(sandfleet.SandfleetError) as cm:
            sb.status()
        self.assertEqual((cm.exception.code, len(Fake.seen)), ("unavailable", 3))

    def test_pending_then_wait(self):
        Fake.script[("POST", "/v1/jobs")] = [(202, {"Location": "/v1/jobs/j1"}, {"id": "j1", "status": "queued"})]
        Fake.script[("GET", "/v1/jobs/j1")] = [(202, {}, {"id": "j1", "status": "running"}), (200, {}, dict(RESULT, id="j1"))]
        self.assertEqual(self.sb.run("x").id, "j1")
        self.assertIn("wait=", Fake.seen[-1][1])
        Fake.script[("GET", "/v1/jobs/j2")] = [(202, {}, {"id": "j2", "status": "running"})]
        with self.assertRaises(sandfleet.SandfleetTimeout):
            self.sb.wait("j2", timeout=0.2)
        self.assertIsNone(self.sb.get("j2"))

    def test_unreachable(self):
        sb = sandfleet.Sandbox("http://127.0.0.1:9", retries=1, backoff=0.01)
        with self.assertRaises(sandfleet.SandfleetError) as cm:
            sb.status()
        self.assertEqual(cm.exception.code, "unreachable")
        out = sandfleet.DockerSandbox(url="http://127.0.0.1:9").execute("print(1)")
        self.assertFalse(out["success"])
        self.assertEqual(out["exit_code"], -1)
        self.assertTrue(out["output"].startswith("Sandbox error: "))

    def test_docker_sandbox_shape(self):
        timeout = dict(RESULT, status="timeout", exit_code=None, stdout="partial\n", error="killed at 2s")
        Fake.script[("POST", "/v1/jobs")] = [(200, {}, dict(RESULT, stderr="warn\n")), (200, {}, timeout)]
        sb = sandfleet.DockerSandbox(sandfleet.SandboxConfig(timeout=2, memory_limit="256m"), url=self.url)
        self.assertEqual(sb.execute("print('hi')"), {"success": True, "output": "hi\nwarn\n", "exit_code": 0})
        job = json.loads(Fake.seen[0][3])
        self.assertEqual(job["image"], "python")
        self.assertEqual(job["limits"], {"memory": "256m", "cpus": 1.0, "timeout": "2s", "network": False})
        out = sb.execute("while True: pass")
        self.assertEqual((out["success"], out["exit_code"]), (False, 124))
        self.assertIn("timeout: killed at 2s", out["output"])

    def test_stream_without_live_output(self):
        Fake.script[("POST", "/v1/jobs")] = [(202, {}, {"id": "s1", "status": "queued"})]
        Fake.script[("GET", "/v1/jobs/s1/events")] = [(501, {}, {"error": {"code": "not_implemented", "message": "later"}})]
        Fake.script[("GET", "/v1/jobs/s1")] = [(200, {}, dict(RESULT, id="s1", stderr="e\n"))]
        st = self.sb.stream("print('hi')")
        self.assertEqual([(o.stream, o.text) for o in st], [("stdout", "hi\n"), ("stderr", "e\n")])
        self.assertEqual(st.result.id, "s1")

    def test_batch(self):
        lines = [{"line": 2, "error": {"code": "invalid_job", "message": "bad"}},
                 {"line": 1, "result": dict(RESULT, id="b-1"), "reused": True},
                 {"summary": {"total": 1, "done": 1}}]
        body = "".join(json.dumps(l) + "\n" for l in lines).encode()
        Fake.script[("POST", "/v1/batches")] = [(200, {"Content-Type": "application/x-ndjson", "X-Sandfleet-Batch": "n"}, body)]
        run = self.sb.batch([{"image": "python", "code": "print(1)"}, {"bogus": 1}], name="n")
        items = list(run)
        self.assertEqual([(i.line, i.error.code if i.error else i.result.id, i.reused) for i in items],
                         [(2, "invalid_job", False), (1, "b-1", True)])
        self.assertEqual((run.name, run.summary["done"]), ("n", 1))
        self.assertIn("name=n", Fake.seen[0][1])
        self.assertEqual(Fake.seen[0][3].count(b"\n"), 2)

    def test_base64_output(self):
        r = sandfleet.Result.from_json(dict(RESULT, stdout="/w==", stdout_encoding="base64"))
        self.assertEqual(r.stdout_bytes(), b"\xff")
        self.assertEqual(r.output, "\ufffd")

    def test_cut_download_is_short_download(self):
        """A download the gateway cuts (its digest failed) is SandfleetError short_download."""
        Fake.script = {("GET", "/v1/jobs/j1/artifacts/a.bin"): [(200, {"Content-Length": "100"}, b"x" * 40)]}
        with self.assertRaises(sandfleet.SandfleetError) as cm:
            self.sb.artifact("j1", "a.bin")
        self.assertEqual(cm.exception.code, "short_download")

    def test_download_failing_its_digest(self):
        """A download whose bytes fail the gateway's X-Sandfleet-Sha256 is SandfleetError digest_mismatch."""
        good = hashlib.sha256(b"x" * 40).hexdigest()
        Fake.script = {("GET", "/v1/jobs/j1/artifacts/a.bin"): [
            (200, {"Content-Length": "40", "X-Sandfleet-Sha256": good}, b"x" * 40),
            (200, {"Content-Length": "40", "X-Sandfleet-Sha256": good}, b"y" * 40)]}
        self.assertEqual(self.sb.artifact("j1", "a.bin"), b"x" * 40)
        with self.assertRaises(sandfleet.SandfleetError) as cm:
            self.sb.artifact("j1", "a.bin")
        self.assertEqual(cm.exception.code, "digest_mismatch")

    def test_stream_timeout_ends_a_silent_stream(self):
        """stream(timeout=) raises SandfleetTimeout at the deadline, even while no event comes."""
        Fake.script = {("POST", "/v1/jobs"): [(202, {}, {"id": "s1", "status": "queued"})],
                       ("GET", "/v1/jobs/s1/events"): [(200, {}, b"HOLD")]}
        Fake.release.clear()
        start = time.monotonic()
        try:
            with self.assertRaises(sandfleet.SandfleetTimeout):
                for _ in self.sb.stream("print(1)", timeout=1):
                    pass
            self.assertLess(time.monotonic() - start, 5)
        finally:
            Fake.release.set()

    def test_stream_timeout_while_output_trickles(self):
        """stream(timeout=) raises at the deadline, not at the next event past it."""
        Fake.script = {("POST", "/v1/jobs"): [(202, {}, {"id": "s1", "status": "queued"})],
                       ("GET", "/v1/jobs/s1/events"): [(200, {}, b"TRICKLE")]}
        Fake.release.clear()
        start = time.monotonic()
        try:
            with self.assertRaises(sandfleet.SandfleetTimeout):
                for _ in self.sb.stream("print(1)", timeout=1):
                    pass
            self.assertLess(time.monotonic() - start, 1.6)
        finally:
            Fake.release.set()


    def test_call_tool_in_each_shape(self):
        png = {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}
        Fake.script[("POST", "/v1/tools/run_code")] = [(200, {}, {"content": [{"type": "text", "text": "exit 0\n42"}, png]})]
        openai_call = {"id": "call_1", "type": "function",
                       "function": {"name": "run_code", "arguments": '{"language": "python", "code": "print(42)"}'}}
        reply = self.sb.call_tool(openai_call).to_message()
        self.assertEqual(reply["role"], "tool")
        self.assertEqual(reply["tool_call_id"], "call_1")
        self.assertIn("42", reply["content"])
        self.assertIn("image/png", reply["content"])

        class ToolUse:  # an SDK's object, not a dict
            type, id, name, input = "tool_use", "toolu_1", "run_code", {"language": "python", "code": "print(42)"}
        reply = self.sb.call_tool(ToolUse()).to_message()
        self.assertEqual((reply["type"], reply["tool_use_id"], reply["is_error"]), ("tool_result", "toolu_1", False))
        self.assertEqual(reply["content"][0], {"type": "text", "text": "exit 0\n42"})
        self.assertEqual(reply["content"][1]["source"]["media_type"], "image/png")
        bodies = [json.loads(b) for m, p, _, b in Fake.seen if p == "/v1/tools/run_code"]
        self.assertEqual(bodies, [{"language": "python", "code": "print(42)"}] * 2, "both shapes send the same arguments")

        Fake.script[("POST", "/v1/tools/run_code")] = [(200, {}, {"content": [{"type": "text", "text": "exit 3"}], "isError": True})]
        res = self.sb.call_tool("run_code", {"language": "python", "code": "exit(3)"})
        self.assertTrue(res.is_error)
        self.assertTrue(res.to_anthropic("t")["is_error"])
        with self.assertRaises(sandfleet.SandfleetError):
            self.sb.call_tool({"name": "run_code"})  # neither shape

        # Arguments a model got wrong are a result it can correct, not an
        # exception that ends the loop: not JSON is told at once, the rest
        # goes to the server, whose schema says what is wrong.
        sent = len(Fake.seen)
        bad = {"id": "call_2", "type": "function", "function": {"name": "run_code", "arguments": '{"code": "print(1)"'}}
        reply = self.sb.call_tool(bad).to_message()
        self.assertEqual((reply["role"], reply["tool_call_id"]), ("tool", "call_2"))
        self.assertIn("not JSON", reply["content"])
        self.assertEqual(len(Fake.seen), sent, "nothing sent for arguments that are not JSON")
        Fake.script[("POST", "/v1/tools/run_code")] = [(200, {}, {"content": [{"type": "text", "text": "must be an object"}], "isError": True})]
        res = self.sb.call_tool({"id": "call_3", "type": "function", "function": {"name": "run_code", "arguments": "[1, 2]"}})
        self.assertTrue(res.is_error)
        self.assertEqual(json.loads(Fake.seen[-1][3]), [1, 2])

    def test_tools(self):
        Fake.script[("GET", "/v1/tools")] = [(200, {}, {"format": "anthropic", "tools": [{"name": "run_code"}]})]
        self.assertEqual(self.sb.tools("anthropic"), [{"name": "run_code"}])
        self.assertTrue(Fake.seen[-1][1].endswith("?format=anthropic"))


if __name__ == "__main__":
    unittest.main()
