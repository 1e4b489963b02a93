"""sandfleet: run untrusted code on a sandfleet fleet, over its HTTP API.

Standard library only (urllib, json), Python 3.9 or newer.

    from sandfleet import Sandbox

    sb = Sandbox("http://127.0.0.1:8080", token="sft_...")
    result = sb.run("print(6*7)")
    print(result.stdout, result.status, result.exit_code)

The seed's class works unchanged, with the fleet in place of a local
Docker engine (SANDFLEET_URL and SANDFLEET_TOKEN say where and who):

    from sandfleet import DockerSandbox, SandboxConfig

    sandbox = DockerSandbox()
    result = sandbox.execute("print('Hello from the sandbox!')")
    # {"success": True, "output": "Hello from the sandbox!\\n", "exit_code": 0}

Errors of the API raise SandfleetError, whose `code` is the server's
stable error code (queue_full, unauthorized, invalid_job, ...). Requests
are retried with backoff on 429 and 503 (honouring Retry-After) and when
the gateway cannot be reached; every job gets its ID before the first
attempt, so a retried submit never runs a job twice.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import random
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

__all__ = [
    "BatchItem",
    "CodeError",
    "CodeResult",
    "DockerSandbox",
    "ExecResult",
    "Files",
    "Processes",
    "Output",
    "Result",
    "Sandbox",
    "ToolResult",
    "SandboxConfig",
    "SandfleetError",
    "SandfleetTimeout",
    "Session",
]

__version__ = "0.1.0"

DEFAULT_URL = "http://127.0.0.1:8080"
"""Where `worker --embedded` (make run) serves the API."""

_USER_AGENT = f"sandfleet-python/{__version__}"
_LONG_POLL = 30.0  # seconds the server is asked to hold each wait


class SandfleetError(Exception):
    """An error answer of the API, or a failure to reach it.

    `code` is the server's stable code (see GET /openapi.yaml), or
    "unreachable" when no answer came; `status` the HTTP status (0 without
    an answer); `retry_after` the seconds the server asked to wait.
    """

    def __init__(self, message: str, *, code: str = "", status: int = 0, retry_after: Optional[float] = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.retry_after = retry_after

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" if self.code else self.message


class SandfleetTimeout(SandfleetError, TimeoutError):
    """No result within the time the caller allowed. The job goes on."""

    def __init__(self, message: str, job_id: str):
        super().__init__(message, code="timeout")
        self.job_id = job_id


@dataclass(frozen=True)
class Result:
    """A job's result (the fleet's Result JSON)."""

    id: str
    status: str
    exit_code: Optional[int]
    stdout: str
    stderr: str
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: Optional[int] = None
    cpu_ms: Optional[int] = None
    peak_memory_bytes: Optional[int] = None
    worker: str = ""
    attempt: int = 0
    error: str = ""
    labels: Dict[str, str] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Result":
        return cls(
            id=d.get("id", ""),
            status=d.get("status", ""),
            exit_code=d.get("exit_code"),
            stdout=d.get("stdout", ""),
            stderr=d.get("stderr", ""),
            stdout_truncated=bool(d.get("stdout_truncated")),
            stderr_truncated=bool(d.get("stderr_truncated")),
            duration_ms=d.get("duration_ms"),
            cpu_ms=d.get("cpu_ms"),
            peak_memory_bytes=d.get("peak_memory_bytes"),
            worker=d.get("worker", ""),
            attempt=d.get("attempt", 0),
            error=d.get("error", ""),
            labels=dict(d.get("labels") or {}),
            raw=dict(d),
        )

    @property
    def success(self) -> bool:
        """The job ran and exited 0."""
        return self.status == "succeeded"

    @property
    def output(self) -> str:
        """stdout, then stderr (each as text; see stdout_bytes for bytes)."""
        return _text(self.stdout, self.raw.get("stdout_encoding")) + _text(self.stderr, self.raw.get("stderr_encoding"))

    def stdout_bytes(self) -> bytes:
        """stdout exactly as the job wrote it."""
        return _bytes(self.stdout, self.raw.get("stdout_encoding"))

    def stderr_bytes(self) -> bytes:
        """stderr exactly as the job wrote it."""
        return _bytes(self.stderr, self.raw.get("stderr_encoding"))


def _bytes(s: str, encoding: Optional[str]) -> bytes:
    return base64.b64decode(s) if encoding == "base64" else s.encode("utf-8")


def _text(s: str, encoding: Optional[str]) -> str:
    return _bytes(s, encoding).decode("utf-8", "replace") if encoding == "base64" else s


@dataclass(frozen=True)
class Output:
    """A piece of a job's output, as `Sandbox.stream` yields it."""

    stream: str  # "stdout" or "stderr"
    text: str


@dataclass(frozen=True)
class BatchItem:
    """One line of a batch's answer: its result, or why it is bad."""

    line: int
    result: Optional[Result] = None
    error: Optional[SandfleetError] = None
    reused: bool = False


def _new_id() -> str:
    """A UUIDv7 (time-ordered, 74 random bits), as the fleet makes them."""
    ms = int(time.time() * 1000) & ((1 << 48) - 1)
    rand = int.from_bytes(os.urandom(10), "big")
    v = (ms << 80) | (0x7 << 76) | (((rand >> 62) & 0xFFF) << 64) | (0b10 << 62) | (rand & ((1 << 62) - 1))
    h = f"{v:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class Sandbox:
    """A client of a sandfleet gateway. Safe to share between threads.

    url defaults to $SANDFLEET_URL, else http://127.0.0.1:8080; token to
    $SANDFLEET_TOKEN (none for a gateway on loopback without tokens).
    timeout bounds each HTTP exchange (a long poll gets its wait on top);
    retries is how many times a request is retried on 429, 503 or no
    answer, with exponential backoff from `backoff` seconds.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        *,
        timeout: float = 30.0,
        retries: int = 5,
        backoff: float = 0.25,
        image: str = "python",
        queue: Optional[str] = None,
    ):
        self.url = (url or os.environ.get("SANDFLEET_URL") or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else os.environ.get("SANDFLEET_TOKEN")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.image = image
        self.queue = queue

    # -- jobs -------------------------------------------------------------

    def job(
        self,
        code: Optional[str] = None,
        *,
        image: Optional[str] = None,
        argv: Optional[Sequence[str]] = None,
        files: Optional[Mapping[str, str]] = None,
        stdin: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        limits: Optional[Mapping[str, Any]] = None,
        labels: Optional[Mapping[str, str]] = None,
        workspace: Optional[str] = None,
        outputs: Optional[Sequence[str]] = None,
        queue: Optional[str] = None,
        id: Optional[str] = None,
    ) -> Dict[str, Any]:
        """The Job JSON for these arguments (what run and submit send).

        workspace and outputs are for fleets with workspaces and artifacts;
        a fleet without them refuses the job (unknown_field).
        """
        job: Dict[str, Any] = {"id": id or _new_id(), "image": image or self.image}
        for key, value in (
            ("queue", queue or self.queue),
            ("code", code),
            ("argv", list(argv) if argv is not None else None),
            ("files", dict(files) if files else None),
            ("stdin", stdin),
            ("env", dict(env) if env else None),
            ("limits", dict(limits) if limits else None),
            ("labels", dict(labels) if labels else None),
            ("workspace", workspace),
            ("outputs", list(outputs) if outputs is not None else None),
        ):
            if value is not None:
                job[key] = value
        return job

    def run(self, code: Optional[str] = None, *, timeout: Optional[float] = None, **kwargs: Any) -> Result:
        """Run a job and return its result (whatever its status).

        Takes the arguments of `job`. timeout bounds the wait for the result
        in seconds (default: as long as it takes); past it SandfleetTimeout
        is raised and the job goes on.
        """
        job = self.job(code, **kwargs)
        deadline = None if timeout is None else time.monotonic() + timeout
        wait = _LONG_POLL if timeout is None else max(0.0, min(_LONG_POLL, timeout))
        status, body = self._request("POST", "/v1/jobs", query={"wait": _secs(wait)}, body=job, wait=wait)
        if status == 200:
            return Result.from_json(body)
        return self.wait(body["id"], timeout=None if deadline is None else deadline - time.monotonic())

    def submit(self, code: Optional[str] = None, **kwargs: Any) -> str:
        """Queue a job and return its ID at once. Takes the arguments of `job`."""
        _, body = self._request("POST", "/v1/jobs", body=self.job(code, **kwargs))
        return body["id"]

    def get(self, job_id: str) -> Optional[Result]:
        """The job's result, or None while it is queued or running."""
        status, body = self._request("GET", "/v1/jobs/" + _quote(job_id))
        return Result.from_json(body) if status == 200 else None

    def wait(self, job_id: str, timeout: Optional[float] = None) -> Result:
        """Wait for the job's result (long polls of up to 30 s each)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = _LONG_POLL if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise SandfleetTimeout(f"job {job_id}: no result within {timeout:g}s", job_id)
            wait = min(_LONG_POLL, left)
            status, body = self._request("GET", "/v1/jobs/" + _quote(job_id), query={"wait": _secs(wait)}, wait=wait)
            if status == 200:
                return Result.from_json(body)

    def cancel(self, job_id: str) -> Optional[Result]:
        """Cancel a job: its canceled result, or None when the cancel is
        recorded and no worker has carried it out yet. A finished job
        raises SandfleetError with code already_finished."""
        status, body = self._request("POST", "/v1/jobs/" + _quote(job_id) + "/cancel", wait=5.0)
        return Result.from_json(body) if status == 200 else None

    def stream(self, code: Optional[str] = None, **kwargs: Any) -> "Stream":
        """Run a job and yield its output as it comes (Output items).

        After the loop, the Stream's `result` holds the job's result. A
        gateway without live output (501 on /events) yields the whole
        output once the job has finished.
        """
        timeout = kwargs.pop("timeout", None)
        job_id = self.submit(code, **kwargs)
        return Stream(self, job_id, timeout)

    # -- artifacts and workspaces ------------------------------------------

    def artifacts(self, job_id: str) -> Dict[str, Any]:
        """What a finished job kept of its `outputs`: {"artifacts": [{name,
        size, sha256, key}], "skipped": [{name, size, reason}]}. A job
        without a result yet raises SandfleetError(code="not_finished")."""
        status, body = self._request("GET", "/v1/jobs/" + _quote(job_id) + "/artifacts")
        if status != 200:
            raise SandfleetError(f"job {job_id} has not finished", code="not_finished", status=status)
        return body

    def artifact(self, job_id: str, name: str) -> bytes:
        """One artifact's bytes (name as listed, e.g. "results/plot.png")."""
        path = "/v1/jobs/" + _quote(job_id) + "/artifacts/" + "/".join(_quote(p) for p in name.split("/"))
        return self._download(path, None)

    def workspace(self, name: str) -> Dict[str, Any]:
        """A workspace's head: revision, size_bytes, files, job, kept."""
        return self._request("GET", "/v1/workspaces/" + _quote(name))[1]

    def snapshot(self, name: str, revision: Optional[int] = None) -> bytes:
        """A workspace's snapshot (its head, or a revision it keeps) as the
        bytes of a tar archive: tarfile.open(fileobj=io.BytesIO(data))."""
        return self._download("/v1/workspaces/" + _quote(name) + "/snapshot", {"revision": str(revision) if revision else None})

    def _download(self, path: str, query: Optional[Mapping[str, Optional[str]]]) -> bytes:
        with self._open("GET", path, query=query, data=None, content_type="", wait=0.0) as resp:
            if resp.status != 200:
                raise SandfleetError(f"{path}: the job has not finished", code="not_finished", status=resp.status)
            want = resp.headers.get("Content-Length")
            try:
                data = resp.read()
            except (http.client.IncompleteRead, ConnectionError) as e:
                # The gateway cuts a download whose bytes fail their digest.
                got = len(e.partial) if isinstance(e, http.client.IncompleteRead) else "fewer"
                raise SandfleetError(f"{path}: {got} of {want} bytes arrived", code="short_download") from e
            if want is not None and len(data) != int(want):
                raise SandfleetError(f"{path}: {len(data)} of {want} bytes arrived", code="short_download")
            digest = resp.headers.get("X-Sandfleet-Sha256")
            if digest and hashlib.sha256(data).hexdigest() != digest.lower():
                raise SandfleetError(f"{path}: the bytes that arrived fail their sha256 {digest}", code="digest_mismatch")
            return data

    # -- batches and the fleet ---------------------------------------------

    def batch(
        self,
        jobs: Iterable[Mapping[str, Any]],
        *,
        name: Optional[str] = None,
        window: Optional[int] = None,
        queue: Optional[str] = None,
        strict: bool = False,
    ) -> "BatchRun":
        """Run jobs (Job dicts) as one batch; iterate for BatchItems in the
        order they finish. The same jobs under the same name reuse the
        results already stored. A strict batch with a bad line raises
        SandfleetError(code="invalid_batch") and runs nothing."""
        body = "".join(json.dumps(j, separators=(",", ":")) + "\n" for j in jobs).encode()
        query = {"name": name, "window": str(window) if window else None, "queue": queue, "strict": "true" if strict else None}
        resp = self._open("POST", "/v1/batches", query=query, data=body, content_type="application/x-ndjson", wait=None)
        return BatchRun(resp)

    def status(self) -> Dict[str, Any]:
        """The fleet's workers and queues (GET /v1/status)."""
        return self._request("GET", "/v1/status")[1]

    # -- tools, for a model's function calls ------------------------------

    def tools(self, format: str = "openai") -> "list[Dict[str, Any]]":
        """The tools as a model's definitions (GET /v1/tools): "openai"
        (Chat Completions' {"type": "function", ...}), "anthropic"
        ({name, description, input_schema}) or "mcp"."""
        return self._request("GET", "/v1/tools", query={"format": format})[1]["tools"]

    def call_tool(self, call: Any, arguments: "Optional[Mapping[str, Any] | str]" = None) -> "ToolResult":
        """Run one tool call as /mcp's tools/call would (POST /v1/tools/NAME).

        call is a tool's name (then arguments is a dict, or a JSON string as
        OpenAI gives it), or a model's call as its API hands it over, a dict
        or the SDK's object: OpenAI's tool call ({"id", "type": "function",
        "function": {"name", "arguments"}}) or Anthropic's tool_use block
        ({"type": "tool_use", "id", "name", "input"}). A failing program is
        a result with is_error, never an exception; to_message() is the
        reply to hand the model back, in the shape of the call.
        """
        if isinstance(call, str):
            name, args, shape, call_id = call, arguments, "", ""
        else:
            name, args, shape, call_id = _tool_call(call)
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError as e:
                # A model's arguments that are not JSON are its mistake to
                # correct, told as the server tells a schema's refusal.
                return ToolResult({"isError": True, "content": [{"type": "text", "text": _clip(
                    "validating \"arguments\": not JSON (%s): %s" % (e, args), 1000)}]}, shape=shape, call_id=call_id)
        if args is None:
            args = {}
        timeout = 0.0
        if isinstance(args, Mapping):
            args = dict(args)
            try:
                timeout = max(0.0, float(args.get("timeout") or 0))
            except (TypeError, ValueError):
                pass  # the server's schema refuses it
        _, res = self._request("POST", "/v1/tools/" + _quote(name), body=args, wait=timeout + 60.0)
        return ToolResult(res, shape=shape, call_id=call_id)

    # -- sessions ----------------------------------------------------------

    def create_session(
        self,
        *,
        image: Optional[str] = None,
        limits: Optional[Mapping[str, Any]] = None,
        env: Optional[Mapping[str, str]] = None,
        files: Optional[Mapping[str, str]] = None,
        idle_timeout: Optional[float] = None,
        max_lifetime: Optional[float] = None,
        labels: Optional[Mapping[str, str]] = None,
        persist: bool = False,
        workspace: Optional[str] = None,
    ) -> "Session":
        """Start a session: a sandbox kept across calls (POST /v1/sessions).

        Use it as a context manager (`with sb.create_session() as s:`) to end
        it on the way out; idle_timeout and max_lifetime are in seconds.
        With persist (or a workspace name) its /workspace is checkpointed,
        and it can be paused, resumed and forked, and survives its worker.
        """
        spec: Dict[str, Any] = {"image": image or self.image}
        for key, value in (
            ("limits", dict(limits) if limits else None),
            ("env", dict(env) if env else None),
            ("files", dict(files) if files else None),
            ("idle_timeout", _secs(idle_timeout) if idle_timeout else None),
            ("max_lifetime", _secs(max_lifetime) if max_lifetime else None),
            ("labels", dict(labels) if labels else None),
            ("persist", persist or None),
            ("workspace", workspace),
        ):
            if value is not None:
                spec[key] = value
        _, info = self._request("POST", "/v1/sessions", body=spec, headers={"Idempotency-Key": _new_id()})
        return Session(self, info)

    def session(self, session_id: str) -> "Session":
        """A session made earlier, by its ID."""
        _, info = self._request("GET", "/v1/sessions/" + _quote(session_id))
        return Session(self, info)

    def sessions(self) -> "list[Dict[str, Any]]":
        """This token's sessions' records, running first."""
        return self._request("GET", "/v1/sessions")[1]["sessions"]

    # -- HTTP --------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, Optional[str]]] = None,
        body: Any = None,
        wait: float = 0.0,
        headers: Optional[Mapping[str, str]] = None,
    ) -> "tuple[int, Any]":
        data = None if body is None else json.dumps(body).encode()
        with self._open(method, path, query=query, data=data, content_type="application/json", wait=wait, extra=headers) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None

    def _open(self, method, path, *, query, data, content_type, wait, read_timeout=None, extra=None):
        url = self.url + path
        q = {k: v for k, v in (query or {}).items() if v is not None}
        if q:
            url += "?" + urllib.parse.urlencode(q)
        headers = {"Accept": "application/json", "User-Agent": _USER_AGENT}
        if data is not None:
            headers["Content-Type"] = content_type
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        headers.update(extra or {})
        timeout = None if wait is None else self.timeout + wait
        if read_timeout is not None:
            timeout = read_timeout  # the socket's, for the connection and each read
        attempt = 0
        while True:
            req = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                return urllib.request.urlopen(req, timeout=timeout)
            except urllib.error.HTTPError as e:
                err = _api_error(e)
                e.close()
                if err.status not in (429, 503) or attempt >= self.retries:
                    raise err from None
            except (urllib.error.URLError, OSError) as e:  # no answer: refused, reset, timed out
                reason = getattr(e, "reason", e)
                err = SandfleetError(f"cannot reach {self.url}: {reason}", code="unreachable")
                if attempt >= self.retries:
                    raise err from None
            delay = self.backoff * (2**attempt) * (0.5 + random.random() / 2)
            time.sleep(max(delay, err.retry_after or 0.0))
            attempt += 1


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n] + "..."


def _field(obj: Any, key: str) -> Any:
    """obj[key] of a dict, obj.key of an SDK's object."""
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _tool_call(call: Any) -> "tuple[str, Any, str, str]":
    """A model's tool call: its name, arguments, shape and ID."""
    fn = _field(call, "function")
    if fn is not None:  # OpenAI: arguments are a JSON string
        return _field(fn, "name"), _field(fn, "arguments"), "openai", _field(call, "id") or ""
    if _field(call, "type") == "tool_use":  # Anthropic: input is an object
        return _field(call, "name"), _field(call, "input"), "anthropic", _field(call, "id") or ""
    raise SandfleetError("not a tool call: want OpenAI's {function: {name, arguments}} or Anthropic's "
                         "{type: tool_use, name, input}", code="invalid_request")


class ToolResult:
    """A tool call's result: MCP's content parts (text, image) and is_error."""

    def __init__(self, d: Mapping[str, Any], *, shape: str = "", call_id: str = ""):
        self.raw = dict(d)
        self.content: "list[Dict[str, Any]]" = list(d.get("content") or [])
        self.is_error: bool = bool(d.get("isError", False))
        self.shape = shape
        self.call_id = call_id

    @property
    def text(self) -> str:
        """The text parts, joined: what a text-only model reads."""
        return "\n".join(p.get("text", "") for p in self.content if p.get("type") == "text")

    def to_openai(self, tool_call_id: Optional[str] = None) -> Dict[str, Any]:
        """A Chat Completions tool message. Its content is text only (the
        API takes no images in a tool message): an image is named there."""
        parts = []
        for p in self.content:
            if p.get("type") == "text":
                parts.append(p.get("text", ""))
            elif p.get("type") == "image":
                parts.append("[an image, %s, %d bytes of base64]" % (p.get("mimeType", "?"), len(p.get("data", ""))))
        return {"role": "tool", "tool_call_id": tool_call_id or self.call_id, "content": "\n".join(parts)}

    def to_anthropic(self, tool_use_id: Optional[str] = None) -> Dict[str, Any]:
        """A Messages API tool_result block, images as image blocks."""
        blocks: "list[Dict[str, Any]]" = []
        for p in self.content:
            if p.get("type") == "text":
                blocks.append({"type": "text", "text": p.get("text", "")})
            elif p.get("type") == "image":
                blocks.append({"type": "image", "source": {"type": "base64", "media_type": p.get("mimeType", "image/png"),
                                                           "data": p.get("data", "")}})
        return {"type": "tool_result", "tool_use_id": tool_use_id or self.call_id, "content": blocks,
                "is_error": self.is_error}

    def to_message(self) -> Dict[str, Any]:
        """The reply in the shape of the call it answers."""
        if self.shape == "anthropic":
            return self.to_anthropic()
        return self.to_openai()

    def __repr__(self) -> str:
        return f"ToolResult(is_error={self.is_error!r}, text={self.text[:60]!r})"


class ExecResult:
    """A command's end in a session (or, started in the background, its pid)."""

    def __init__(self, d: Mapping[str, Any]):
        self.raw = dict(d)
        self.exit_code: Optional[int] = d.get("exit_code")
        self.signal: int = d.get("signal", 0)
        self.timed_out: bool = d.get("timed_out", False)
        self.stdout: str = _text(d.get("stdout", ""), d.get("stdout_encoding"))
        self.stderr: str = _text(d.get("stderr", ""), d.get("stderr_encoding"))
        self.truncated: bool = d.get("stdout_truncated", False) or d.get("stderr_truncated", False)
        self.duration_ms: int = d.get("duration_ms", 0)
        self.pid: Optional[int] = d.get("pid")
        # exclusive: it ran with no other process of the session alive;
        # ended: how many were killed before it started.
        self.exclusive: bool = d.get("exclusive", False)
        self.ended: int = d.get("ended", 0)

    def __repr__(self) -> str:
        return f"ExecResult(exit_code={self.exit_code!r}, stdout={self.stdout[:60]!r})"


class CodeError(Exception):
    """What a cell raised: name, value and traceback, as Python says them."""

    def __init__(self, d: Mapping[str, Any]):
        super().__init__(f"{d.get('name')}: {d.get('value')}")
        self.name: str = d.get("name", "")
        self.value: str = d.get("value", "")
        self.traceback: str = d.get("traceback", "")


class CodeResult:
    """A cell's end: the trailing expression's value as text, its output,
    and what it raised (error, a CodeError, or None)."""

    def __init__(self, d: Mapping[str, Any]):
        self.raw = dict(d)
        self.text: Optional[str] = d.get("text")
        self.stdout: str = _text(d.get("stdout", ""), d.get("stdout_encoding"))
        self.stderr: str = _text(d.get("stderr", ""), d.get("stderr_encoding"))
        self.error: Optional[CodeError] = CodeError(d["error"]) if d.get("error") else None
        self.reset: bool = d.get("reset", False)
        self.timed_out: bool = d.get("timed_out", False)
        self.language: str = d.get("language", "python")
        # A bash cell's status (its last command's); None for the others.
        self.exit_code: Optional[int] = d.get("exit_code")

    def __repr__(self) -> str:
        return f"CodeResult(text={self.text!r}, error={self.error!r})"


class Session:
    """A sandbox kept across calls. Made by Sandbox.create_session."""

    def __init__(self, sandbox: "Sandbox", info: Mapping[str, Any]):
        self._sb = sandbox
        self.id: str = info["id"]
        self.info: Dict[str, Any] = dict(info)
        self._path = "/v1/sessions/" + _quote(self.id)
        self.files = Files(self)
        self.processes = Processes(self)
        self.ports = Ports(self)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method: str, rel: str, body: Any = None, *, wait: float = 0.0, query=None) -> Any:
        headers = {"Idempotency-Key": _new_id()} if method != "GET" else None
        return self._sb._request(method, self._path + rel, body=body, wait=wait, query=query, headers=headers)[1]

    def exec(
        self,
        cmd: "str | Sequence[str]",
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[str] = None,
        timeout: Optional[float] = None,
        background: bool = False,
        exclusive: bool = False,
    ) -> ExecResult:
        """Run a command: a string goes to /bin/sh -c, a list is an argv.

        With exclusive, every other process of the session (background
        processes, terminals, code contexts) is killed first and none may
        start until the command ends, so that nothing but the command can
        write into its output or touch its exit code: use it for a
        verifier whose verdict grades the session's work."""
        body: Dict[str, Any] = {"shell": cmd} if isinstance(cmd, str) else {"cmd": list(cmd)}
        for key, value in (("cwd", cwd), ("env", dict(env) if env else None), ("stdin", stdin),
                           ("timeout", _secs(timeout) if timeout else None), ("background", background or None),
                           ("exclusive", exclusive or None)):
            if value is not None:
                body[key] = value
        return ExecResult(self._call("POST", "/exec", body, wait=timeout or 600.0))

    def run_code(self, code: str, *, language: Optional[str] = None, context: Optional[str] = None,
                 timeout: Optional[float] = None) -> CodeResult:
        """Run a cell in a stateful context of language: "python" (the
        default), "javascript", "typescript" or "bash". The context defaults
        to "default" for python and to the language's name for the others."""
        body: Dict[str, Any] = {"code": code}
        if language:
            body["language"] = language
        if context:
            body["context"] = context
        if timeout:
            body["timeout"] = _secs(timeout)
        return CodeResult(self._call("POST", "/code", body, wait=timeout or 600.0))

    def contexts(self) -> "list[Dict[str, Any]]":
        """Its code contexts: [{"name", "language", "cwd", "cells",
        "created_ms"}], cwd where each one's process is now."""
        return self._call("GET", "/contexts")["contexts"]

    def create_context(self, language: str = "python", *, name: Optional[str] = None,
                       cwd: Optional[str] = None) -> Dict[str, Any]:
        """Start a code context in cwd (default the session's directory):
        run_code(..., context=name) runs in it. A name taken already raises
        SandfleetError "exists"; past 16 contexts, "too_many_requests".
        Without a name it takes its language's default name when free."""
        body: Dict[str, Any] = {"language": language}
        if name:
            body["name"] = name
        if cwd:
            body["cwd"] = cwd
        return self._call("POST", "/contexts", body)

    def delete_context(self, name: str) -> None:
        """End a code context: its process is killed and its name is free."""
        self._call("DELETE", "/contexts/" + _quote(name))

    def cells(self) -> Dict[str, Any]:
        """Its recent code cells, oldest first, as its worker keeps them (the
        last 20; an ended session's for 15 minutes): {"cells": [{"seq", "at",
        "duration_ms", "code", "text", "stdout", "stderr", "error", "display",
        ...}], "dropped"}, dropped counting those no longer kept. A read: the
        idle timeout goes on, and a paused session is not resumed (gone)."""
        return self._call("GET", "/cells")

    def keepalive(self) -> Dict[str, Any]:
        """Count as a call: the idle timeout starts again."""
        self.info = self._call("POST", "/keepalive")
        return self.info

    def set_network(self, network: Any) -> Dict[str, Any]:
        """Replace the running session's egress policy, within the worker's
        caps: a limits.network value ({"allow": [...]}, or "none" to lock it
        after the installs). The proxy applies it at once; the session's
        info comes back with its egress so far."""
        self.info = self._call("PUT", "/network", network)
        return self.info

    def pause(self) -> Dict[str, Any]:
        """Checkpoint a persistent session and free its sandbox (status "paused")."""
        self.info = self._call("POST", "/pause")
        return self.info

    def resume(self) -> Dict[str, Any]:
        """Start a paused session again from its checkpoint, on any worker:
        its files are back; processes and interpreters start afresh (each
        context's first cell says reset), and info["restored"] says so."""
        self.info = self._call("POST", "/resume")
        return self.info

    def fork(self, *, persist: Optional[bool] = None, labels: Optional[Mapping[str, str]] = None) -> "Session":
        """A new session from this one's latest checkpoint; this one goes on unchanged."""
        body: Dict[str, Any] = {}
        if persist is not None:
            body["persist"] = persist
        if labels:
            body["labels"] = dict(labels)
        return Session(self._sb, self._call("POST", "/fork", body))

    def get_url(self, port: int) -> str:
        """Where port of the session is reached through the gateway (once
        exposed: ports.expose), for a request with this client's token."""
        return f"{self._sb.url}{self._path}/ports/{int(port)}/"

    @property
    def restored(self) -> Optional[Dict[str, Any]]:
        """From what checkpoint its sandbox was started again, if it was."""
        return self.info.get("restored")

    def refresh(self) -> Dict[str, Any]:
        """The session's record as it is now."""
        self.info = self._call("GET", "")
        return self.info

    def close(self) -> None:
        """End the session. Ending one that has ended already is no error."""
        try:
            self.info = self._call("DELETE", "")
        except SandfleetError as e:
            if e.code not in ("gone", "not_found"):
                raise


class Files:
    """A session's files: paths are relative to /workspace, or under /tmp."""

    def __init__(self, session: Session):
        self._s = session

    def read(self, path: str) -> bytes:
        with self._s._sb._open("GET", self._s._path + "/files/" + urllib.parse.quote(path), query=None, data=None,
                               content_type="", wait=0.0) as resp:
            return resp.read()

    def write(self, path: str, data: "bytes | str", *, mode: Optional[int] = None) -> Dict[str, Any]:
        raw = data.encode() if isinstance(data, str) else data
        query = {"mode": format(mode, "o")} if mode is not None else None
        with self._s._sb._open("PUT", self._s._path + "/files/" + urllib.parse.quote(path), query=query, data=raw,
                               content_type="application/octet-stream", wait=0.0,
                               extra={"Idempotency-Key": _new_id()}) as resp:
            return json.loads(resp.read())

    def list(self, path: str = ".") -> "list[Dict[str, Any]]":
        return self._s._call("GET", "/files", query={"dir": path})["entries"]

    def remove(self, path: str, *, recursive: bool = False) -> None:
        self._s._call("DELETE", "/files/" + urllib.parse.quote(path), query={"recursive": "true"} if recursive else None)


class Ports:
    """A session's exposed ports: a server it runs on the sandbox's
    127.0.0.1, reached through the gateway at Session.get_url(port)."""

    def __init__(self, session: Session):
        self._s = session

    def expose(self, port: int, *, ttl: Optional[float] = None, wait: Optional[float] = None) -> Dict[str, Any]:
        """Expose port (1024 to 65535): {"port", "url", "token",
        "expires_at"}, token a preview token good for this port alone until
        expires_at (ttl seconds, default an hour), which a request may carry
        instead of the owner's token (X-Sandfleet-Preview-Token, or
        ?sandfleet_preview=). With wait, the call first waits up to wait
        seconds for the server to accept a connection (SandfleetError
        "timeout" if it does not)."""
        body: Dict[str, Any] = {"port": int(port)}
        if ttl:
            body["ttl"] = _secs(ttl) + "s"
        if wait:
            body["wait"] = _secs(wait) + "s"
        return self._s._call("POST", "/ports", body, wait=wait or 0.0)

    def list(self) -> "list[Dict[str, Any]]":
        """The ports exposed: [{"port", "url"}]."""
        return self._s._call("GET", "/ports")["ports"]

    def __call__(self) -> "list[Dict[str, Any]]":
        return self.list()

    def unexpose(self, port: int) -> None:
        """Stop exposing port: its URL and preview tokens answer 404, and
        the connections open to it are closed."""
        self._s._call("DELETE", f"/ports/{int(port)}")


class Processes:
    """A session's background processes (started with exec(..., background=True))."""

    def __init__(self, session: Session):
        self._s = session

    def list(self) -> "list[Dict[str, Any]]":
        return self._s._call("GET", "/processes")["processes"]

    def output(self, pid: int, *, since: int = 0, wait: Optional[float] = None) -> Dict[str, Any]:
        """Its output from offset since; with wait, after waiting up to wait
        seconds for it to end. The answer's "next" is the offset to ask next."""
        query = {"since": str(since), "wait": _secs(wait) if wait else None}
        d = self._s._call("GET", f"/processes/{pid}", query=query, wait=wait or 0.0)
        d["output"] = _text(d.get("output", ""), d.get("output_encoding"))
        return d

    def signal(self, pid: int, signal: int = 15) -> None:
        self._s._call("POST", f"/processes/{pid}/signal", {"signal": signal})

    def stdin(self, pid: int, data: "bytes | str", *, eof: bool = False) -> None:
        raw = data.encode() if isinstance(data, str) else data
        with self._s._sb._open("POST", self._s._path + f"/processes/{pid}/stdin", query={"eof": "true"} if eof else None,
                               data=raw, content_type="application/octet-stream", wait=0.0,
                               extra={"Idempotency-Key": _new_id()}) as resp:
            resp.read()


class Stream:
    """The output of a running job, from `Sandbox.stream`."""

    def __init__(self, sandbox: Sandbox, job_id: str, timeout: Optional[float]):
        self.sandbox = sandbox
        self.id = job_id
        self.timeout = timeout
        self.result: Optional[Result] = None

    def __iter__(self) -> Iterator[Output]:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        try:
            # No deadline of the socket's without the caller's: a job may be
            # silent for long. With it, no read waits past it.
            read_timeout = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            resp = self.sandbox._open("GET", f"/v1/jobs/{_quote(self.id)}/events", query=None, data=None,
                                      content_type="", wait=None, read_timeout=read_timeout)
        except SandfleetError as e:
            if e.code != "not_implemented":
                raise
            self.result = self.sandbox.wait(self.id, timeout=self.timeout)
            for name, text in (("stdout", self.result.stdout), ("stderr", self.result.stderr)):
                if text:
                    yield Output(name, _text(text, self.result.raw.get(name + "_encoding")))
            return
        with resp:
            try:
                for event, data in _sse(_lines(resp, deadline)):
                    if event in ("stdout", "stderr"):
                        yield Output(event, data.get("text", ""))
                    elif event == "finished" and "result" in data:
                        self.result = Result.from_json(data["result"])
                    if self.result is None and deadline is not None and time.monotonic() > deadline:
                        raise SandfleetTimeout(f"job {self.id}: no result within {self.timeout:g}s", self.id)
            except (TimeoutError, socket.timeout) as e:  # a read of the socket ran past the deadline
                if isinstance(e, SandfleetTimeout):
                    raise
                raise SandfleetTimeout(f"job {self.id}: no result within {self.timeout:g}s", self.id) from None
        if self.result is None:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            self.result = self.sandbox.wait(self.id, timeout=left)


def _lines(resp, deadline: Optional[float]) -> Iterator[bytes]:
    """The response's lines, each read with what is left of the deadline as
    its socket's timeout: a stream whose output trickles in ends at the
    deadline, not at the first event after it."""
    sock = getattr(getattr(getattr(resp, "fp", None), "raw", None), "_sock", None)
    while True:
        if deadline is not None and sock is not None:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
        line = resp.readline()
        if not line:
            return
        yield line


def _sse(lines: Iterable[bytes]) -> Iterator["tuple[str, Dict[str, Any]]"]:
    """Server-Sent Events: (event, JSON data) pairs."""
    event, data = "message", []
    for raw in lines:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield event, json.loads("\n".join(data))
            event, data = "message", []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


class BatchRun:
    """The answer of a batch, line by line. `summary` is set at the end."""

    def __init__(self, resp):
        self._resp = resp
        self.name: str = resp.headers.get("X-Sandfleet-Batch", "")
        self.summary: Optional[Dict[str, Any]] = None

    def __iter__(self) -> Iterator[BatchItem]:
        with self._resp:
            for raw in self._resp:
                if not raw.strip():
                    continue
                ev = json.loads(raw)
                if "summary" in ev:
                    self.summary = ev["summary"]
                elif "result" in ev:
                    yield BatchItem(ev["line"], result=Result.from_json(ev["result"]), reused=bool(ev.get("reused")))
                elif "line" in ev:
                    e = ev["error"]
                    yield BatchItem(ev["line"], error=SandfleetError(e["message"], code=e["code"], status=400))
                else:  # the batch ended early
                    e = ev["error"]
                    raise SandfleetError(e["message"], code=e["code"])


def _api_error(e: urllib.error.HTTPError) -> SandfleetError:
    retry_after = None
    if e.headers.get("Retry-After", "").isdigit():
        retry_after = float(e.headers["Retry-After"])
    try:
        body = json.loads(e.read())["error"]
        code, message = body["code"], body["message"]
    except Exception:  # not the gateway's JSON: a proxy in between
        code, message = "http_" + str(e.code), e.reason or "HTTP error"
    return SandfleetError(message, code=code, status=e.code, retry_after=retry_after)


def _quote(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def _secs(s: float) -> str:
    return f"{s:.3f}".rstrip("0").rstrip(".") or "0"


# -- the seed's interface ---------------------------------------------------------

_SEED_IMAGE = "agent-sandbox:latest"
"""The seed's image runs `python -c CODE`: on the fleet, the python preset."""

# What a result that did not end on its own reports as exit code, as
# `submit run` exits.
_EXIT_BY_STATUS = {"timeout": 124, "oom": 137, "canceled": 130, "output_limit": 1, "failed": 1, "compile_error": 65}


@dataclass
class SandboxConfig:
    """The seed's configuration, field for field.

    image names a preset of the fleet ("python", "shell"); the seed's
    "agent-sandbox:latest" means python. The fleet's root filesystem is
    always read-only (only /tmp and /workspace are writable), whatever
    read_only says.
    """

    image: str = "agent-sandbox:latest"
    memory_limit: str = "512m"
    nano_cpus: int = 1_000_000_000  # 1 CPU core
    timeout: int = 30
    network_disabled: bool = True
    read_only: bool = True


class DockerSandbox:
    """The seed's DockerSandbox, running on the fleet instead of a local
    Docker engine: execute(code) returns {"success", "output", "exit_code"}
    and never raises, as the seed's does.

    url and token default to $SANDFLEET_URL and $SANDFLEET_TOKEN.
    """

    def __init__(self, config: Optional[SandboxConfig] = None, *, url: Optional[str] = None, token: Optional[str] = None):
        self.config = config or SandboxConfig()
        self.client = Sandbox(url, token)

    def execute(self, code: str) -> dict:
        """Executes code securely in a container."""
        c = self.config
        image = "python" if c.image == _SEED_IMAGE else c.image
        limits = {
            "memory": c.memory_limit,
            "cpus": c.nano_cpus / 1e9,
            "timeout": f"{c.timeout}s",
            "network": not c.network_disabled,
        }
        try:
            # The result comes at the job's timeout at the latest; the
            # margin covers the queue.
            r = self.client.run(code, image=image, limits=limits, timeout=c.timeout + 60)
        except Exception as e:
            return {"success": False, "output": f"Sandbox error: {e}", "exit_code": -1}
        if r.status in ("rejected", "error"):
            return {"success": False, "output": f"Sandbox error: {r.error}", "exit_code": -1}
        output = r.output
        if r.status not in ("succeeded", "failed") and r.error:
            output += ("" if not output or output.endswith("\n") else "\n") + f"[sandfleet] {r.status}: {r.error}\n"
        exit_code = r.exit_code if r.exit_code is not None else _EXIT_BY_STATUS.get(r.status, -1)
        return {"success": r.success, "output": output, "exit_code": exit_code}
