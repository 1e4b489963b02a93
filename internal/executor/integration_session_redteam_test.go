package executor

// Attack tests on sessions: hostile code inside a session that has read
// the source tries, for real, to make the agent report to its owner what
// did not happen, to starve the agent, or to reach what is not its own,
// under every runtime the engine offers (forEachRuntime). The agent runs
// as the session's own uid, as the launcher does for jobs: what that
// allows (lowering PID 1's limits, signalling it) must buy at most an
// honest failure or the session's end, never a forged reply.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// forgeFrames is Python that builds frames a forger would write: signed
// with a made-up MAC, and for the agent's stdin, requests for the ids the
// executor is about to use (they count up from 1).
const forgeFrames = `import os, struct, json
def frame(kind, payload):
    return kind + struct.pack(">I", len(payload)) + payload
def reply(i, code):
    body = json.dumps({"id": i, "exit_code": code, "stdout": "Zm9yZ2Vk"}).encode()
    return frame(b"s", struct.pack(">Q", i) + body + b" " + b"0" * 64)
def request(i, shell):
    body = json.dumps({"id": i, "op": "exec", "shell": shell}).encode()
    return frame(b"Q", struct.pack(">Q", i) + body)
forged = b"".join(reply(i, 0) for i in range(1, 400))
injected = b"".join(request(i, "exit 0") for i in range(1, 400))
`

// A session's code tries every way a process of its uid has to the
// container's streams: PID 1's fds through /proc, its own fds, ptrace,
// and writes of frames (replies with a made-up MAC, requests for the ids
// to come) wherever it could open them. The reply the owner then gets is
// the command's own, and the next command's status is its own too.
func TestIntegrationSessionRedTeamForge(t *testing.T) {
	t.Parallel()
	attack := forgeFrames + `import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
for name, req in [("seize", 0x4206), ("attach", 16)]:
    print("ptrace", name, libc.ptrace(req, 1, 0, 0), ctypes.get_errno())
for fd in sorted(int(n) for n in os.listdir("/proc/self/fd")):
    try:
        print("own fd", fd, os.readlink("/proc/self/fd/%d" % fd))
    except OSError as err:
        print("own fd", fd, "gone", err.errno)
for path, data in [("/proc/1/fd/1", forged), ("/proc/1/fd/2", forged), ("/proc/1/fd/0", injected)]:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as err:
        print("denied", path, err.errno)
        continue
    try:
        print("wrote", path, os.write(fd, data))
    except OSError as err:
        print("write refused", path, err.errno)
    os.close(fd)
for fd in range(3, 64):
    try:
        os.write(fd, forged)
        print("wrote own fd", fd)
    except OSError:
        pass
sys.stdout.buffer.write(forged)
sys.stdout.flush()
os._exit(7)
`
	probe := `import os
for n in (0, 1, 2):
    for mode, name in ((os.O_RDONLY, "read"), (os.O_WRONLY, "write")):
        try:
            os.close(os.open("/proc/1/fd/%d" % n, mode | os.O_NONBLOCK))
            print("opened", n, name, os.readlink("/proc/1/fd/%d" % n))
        except OSError as err:
            print("denied", n, name, err.errno)
`
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		var warns countingHandler
		e.cfg.Logger = slog.New(&warns)
		s := startSession(t, e, SessionSpec{})
		r := do(t, s, ask{Op: sessionapi.OpExec, Cmd: []string{"python3", "-c", probe}})
		t.Logf("PID 1's streams: %s", r.Stdout)
		// Frames that fail their check are said once, not once each: a
		// sandbox must not be able to fill its worker's log.
		defer func() {
			if n := warns.n.Load(); n > 1 {
				t.Errorf("%d warnings logged for the forged frames, want at most one", n)
			}
		}()
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		r, err := call(ctx, s, ask{Op: sessionapi.OpExec, Cmd: []string{"python3", "-c", attack}})
		if err == ErrSessionEnded && e.cfg.Runtime == "runsc" {
			// gVisor lets the attack write to the agent's stream: the
			// first frame that fails its check ends the session.
			if s.Why() != "broken" {
				t.Errorf("the session ended as %q, want broken", s.Why())
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		out := string(r.Stdout)
		t.Logf("the attack said:\n%s", strings.ReplaceAll(out, string(r.Stdout[strings.LastIndex(out, "\n")+1:]), "<forged frames>"))
		if r.Error != nil || r.Exit == nil || *r.Exit != 7 {
			t.Fatalf("the attack's reply: exit %v error %v, want its own 7", r.Exit, r.Error)
		}
		for _, s := range []string{"ptrace seize -1 1", "ptrace attach -1 1"} {
			if !strings.Contains(out, s) {
				t.Errorf("stdout lacks %q", s)
			}
		}
		if e.cfg.Runtime == "runc" {
			for _, s := range []string{"denied /proc/1/fd/1 13", "denied /proc/1/fd/2 13", "denied /proc/1/fd/0 13"} {
				if !strings.Contains(out, s) {
					t.Errorf("stdout lacks %q: PID 1's streams are reachable", s)
				}
			}
		}
		if strings.Contains(out, "wrote own fd") {
			t.Errorf("a command holds an fd past its three streams:\n%s", out)
		}
		// Whatever reached the streams, the owner's next calls get their
		// own answers, or the session ended; never a forged one.
		for i, sh := range []string{"sleep 0.5; echo mine; exit 5", "echo again; exit 6"} {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			r, err := call(ctx, s, ask{Op: sessionapi.OpExec, Shell: sh})
			cancel()
			if err == ErrSessionEnded && e.cfg.Runtime == "runsc" {
				if s.Why() != "broken" {
					t.Errorf("the session ended as %q, want broken", s.Why())
				}
				return
			}
			if err != nil {
				t.Fatalf("call %d after the attack: %v", i, err)
			}
			want := 5 + i
			if r.Exit == nil || *r.Exit != want || !strings.HasSuffix(string(r.Stdout), "\n") || strings.Contains(string(r.Stdout), "forged") {
				t.Fatalf("call %d after the attack: exit %v stdout %q, want %d and its own output", i, r.Exit, r.Stdout, want)
			}
		}
	})
}

// PID 1 of a pid namespace gets only the signals it handles from inside
// it: the agent takes every catchable one, so a session's code that sends
// each to PID 1 leaves it serving (or, under runsc, which delivers them,
// ended honestly), and a later command's status is its own.
func TestIntegrationSessionRedTeamSignals(t *testing.T) {
	t.Parallel()
	attack := `import os, signal, time
for sig in range(1, 65):
    if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        continue  # the polite stops: they end the session, as docker stop does
    try:
        os.kill(1, sig)
    except OSError as err:
        print("kill", sig, err.errno)
time.sleep(0.3)
print("agent alive", os.path.exists("/proc/1/status"), flush=True)
os._exit(4)
`
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		s := startSession(t, e, SessionSpec{})
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		r, err := call(ctx, s, ask{Op: sessionapi.OpExec, Cmd: []string{"python3", "-c", attack}})
		if err == ErrSessionEnded && e.cfg.Runtime == "runsc" {
			t.Logf("under runsc the signals ended the session: %q", s.Why())
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if r.Exit == nil || *r.Exit != 4 {
			t.Fatalf("the attack's reply: exit %v error %v stdout %q", r.Exit, r.Error, r.Stdout)
		}
		r, err = call(ctx, s, ask{Op: sessionapi.OpExec, Shell: "exit 9"})
		if err == ErrSessionEnded && e.cfg.Runtime == "runsc" {
			t.Logf("under runsc the signals ended the session: %q", s.Why())
			return
		}
		if err != nil || r.Exit == nil || *r.Exit != 9 {
			t.Fatalf("a call after the signals: %+v %v, want exit 9", r, err)
		}
	})
}

// countingHandler counts the warnings logged.
type countingHandler struct{ n atomic.Int64 }

func (h *countingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *countingHandler) Handle(context.Context, slog.Record) error {
	h.n.Add(1)
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// mustBeOwn asserts what a session answers after an attack on its agent:
// a command that prints proof and exits with exit gets exactly that, an
// honest error, the session's end, or (when the attack starved it) a
// failure without its proof; never a success.
func mustBeOwn(t *testing.T, s *Session, exit int) (ended bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	r, err := call(ctx, s, ask{Op: sessionapi.OpExec, Shell: fmt.Sprintf("echo proof; exit %d", exit), Timeout: ms(30000)})
	switch {
	case err == ErrSessionEnded:
		t.Logf("the session ended (%q)", s.Why())
		return true
	case err != nil:
		t.Fatalf("exit %d: %v", exit, err)
	case r.Error != nil:
		t.Logf("exit %d: an honest error: %v", exit, r.Error)
	case r.Exit == nil:
		t.Fatalf("exit %d: a reply with no status: %+v", exit, r)
	case *r.Exit == exit && string(r.Stdout) == "proof\n":
	case *r.Exit != 0 && *r.Exit != exit && !strings.Contains(string(r.Stdout), "proof"):
		t.Logf("exit %d: the command could not run: exit %d signal %d stderr %q", exit, *r.Exit, r.Signal, r.Stderr)
	default:
		t.Fatalf("exit %d: got exit %d stdout %q", exit, *r.Exit, r.Stdout)
	}
	return false
}

// The agent runs as the session's uid, so the kernel lets the session's
// code lower PID 1's resource limits (prlimit checks only the uids) and
// renice it. That starves the agent; it cannot make it lie.
func TestIntegrationSessionRedTeamLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, lim string }{
		{"nofile", "(resource.RLIMIT_NOFILE, (3, 3))"},
		{"nproc", "(resource.RLIMIT_NPROC, (0, 0))"},
		{"as", "(resource.RLIMIT_AS, (1 << 20, 1 << 20))"},
		{"cpu", "(resource.RLIMIT_CPU, (1, 1))"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			attack := `import os, resource
lim, val = ` + tc.lim + `
try:
    resource.prlimit(1, lim, val)
    print("lowered", flush=True)
except OSError as err:
    print("refused", err.errno, flush=True)
os.setpriority(os.PRIO_PROCESS, 1, 19)
os._exit(3)
`
			forEachRuntime(t, func(t *testing.T, e *Executor) {
				s := startSession(t, e, SessionSpec{})
				ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
				defer cancel()
				r, err := call(ctx, s, ask{Op: sessionapi.OpExec, Cmd: []string{"python3", "-c", attack}})
				if err == ErrSessionEnded {
					t.Logf("the attack ended the session (%q)", s.Why())
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if r.Error == nil && (r.Exit == nil || *r.Exit != 3) {
					t.Fatalf("the attack's own reply: %+v, want exit 3", r)
				}
				t.Logf("the attack: stdout %q error %v", r.Stdout, r.Error)
				for i := range 3 {
					if mustBeOwn(t, s, 10+i) {
						return
					}
				}
			})
		})
	}
}

// A session's code that takes every pid of its sandbox leaves the agent
// unable to start a command or a thread: it answers each call anyway (an
// honest error), and once the pids are free again it serves as before.
func TestIntegrationSessionRedTeamPids(t *testing.T) {
	t.Parallel()
	bomb := `import os, time
n = 0
while True:
    try:
        if os.fork() == 0:
            time.sleep(3600)
            os._exit(0)
        n += 1
    except OSError:
        break
print("forked", n, flush=True)
time.sleep(3600)
`
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		s := startSession(t, e, SessionSpec{})
		bg := okReply(t, do(t, s, ask{Op: sessionapi.OpExec, Cmd: []string{"python3", "-c", bomb}, Background: true}))
		var ended bool
		testutil.Eventually(t, 60*time.Second, "the bomb to take every pid", func() bool {
			r, err := call(t.Context(), s, ask{Op: sessionapi.OpProcess, PID: bg.PID})
			ended = err == ErrSessionEnded
			return ended || err == nil && strings.Contains(string(r.Output), "forked")
		})
		if ended {
			t.Fatalf("the bomb ended the session (%q)", s.Why())
		}
		// Calls of every kind at once, while no pid is free: each gets an
		// answer, and none is a command's success.
		ops := []ask{
			{Op: sessionapi.OpExec, Shell: "exit 0"},
			{Op: sessionapi.OpExec, Cmd: []string{"true"}, Background: true},
			{Op: sessionapi.OpCode, Code: "1+1", Context: "fresh"},
			{Op: sessionapi.OpWrite, Path: "a.txt", Data: []byte(strings.Repeat("x", 1<<20))},
			{Op: sessionapi.OpRead, Path: "a.txt"},
			{Op: sessionapi.OpList, Path: "."},
			{Op: sessionapi.OpProcesses},
			{Op: envelope.OpPing}, // an executor's: its body is ignored
		}
		errs := make(chan error, 4*len(ops))
		for range 4 {
			for _, op := range ops {
				go func() {
					ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
					defer cancel()
					r, err := call(ctx, s, op)
					if err == nil && op.Op == sessionapi.OpExec && !op.Background && r.Error == nil {
						err = fmt.Errorf("exec with no pid free: exit %v, want an error", r.Exit)
					}
					errs <- err
				}()
			}
		}
		for range 4 * len(ops) {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		okReply(t, do(t, s, ask{Op: sessionapi.OpSignal, PID: bg.PID, Signal: 9}))
		testutil.Eventually(t, 60*time.Second, "a command to run again", func() bool {
			r := do(t, s, ask{Op: sessionapi.OpExec, Shell: "exit 3"})
			return r.Error == nil && r.Exit != nil && *r.Exit == 3
		})
		if r := okReply(t, do(t, s, ask{Op: sessionapi.OpCode, Code: "6*7"})); r.Text != "42" {
			t.Fatalf("a cell after the bomb: %+v", r)
		}
	})
}

// A session's code that fills every writable tree leaves the agent's
// replies as they were: they go down its pipe, not through a file.
func TestIntegrationSessionRedTeamFull(t *testing.T) {
	t.Parallel()
	fill := `import os
for d in ("/tmp", "/workspace"):
    with open(d + "/fill", "wb") as f:
        try:
            while True:
                f.write(b"x" * (1 << 20))
        except OSError as err:
            print(d, "full", err.errno, flush=True)
os._exit(4)
`
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		s := startSession(t, e, SessionSpec{})
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		r, err := call(ctx, s, ask{Op: sessionapi.OpExec, Cmd: []string{"python3", "-c", fill}})
		if err == ErrSessionEnded && e.cfg.Runtime == "runsc" {
			// gVisor keeps a tmpfs in the sandbox's memory: filling it
			// may end the sandbox at its memory limit.
			t.Logf("under runsc the fill ended the session (%q)", s.Why())
			return
		}
		if err != nil || r.Error != nil || r.Exit == nil || *r.Exit != 4 {
			t.Fatalf("fill: %+v %v", r, err)
		}
		t.Logf("filled: %s", r.Stdout)
		// gVisor keeps the trees in the sandbox's memory: the sandbox may
		// end once they are full, between calls as well as in one.
		after := func(req ask) (*answer, bool) {
			t.Helper()
			r, err := call(t.Context(), s, req)
			if err == ErrSessionEnded && runscFull(t, e, s) {
				return nil, false
			}
			if err != nil {
				t.Fatalf("%s: %v", req.Op, err)
			}
			return r, true
		}
		r, ok := after(ask{Op: sessionapi.OpWrite, Path: "more.txt", Data: []byte("x")})
		if !ok {
			return
		}
		if r.Error == nil {
			t.Logf("a write to a full tree worked (a page was free): %+v", r.Entry)
		} else if r.Error.Code != sessionapi.ErrFailed.Code || !strings.Contains(r.Error.Message, "no space") {
			t.Errorf("a write to a full tree: %v, want failed: no space", r.Error)
		}
		if r, ok = after(ask{Op: sessionapi.OpExec, Shell: "echo still; exit 5"}); !ok {
			return
		}
		r = okReply(t, r)
		if r.Exit == nil || *r.Exit != 5 || string(r.Stdout) != "still\n" {
			t.Fatalf("a command with the trees full: exit %v stdout %q", r.Exit, r.Stdout)
		}
		if r, ok = after(ask{Op: sessionapi.OpCode, Code: "'%d' % (6*7)"}); !ok {
			return
		}
		if r := okReply(t, r); r.Text != "'42'" {
			t.Fatalf("a cell with the trees full: %+v", r)
		}
	})
}

// Background processes that write as fast as they can do not starve the
// replies of the session's other calls: each still comes within seconds.
func TestIntegrationSessionRedTeamFlood(t *testing.T) {
	t.Parallel()
	flood := `import os, threading
b = b"x" * (1 << 16)
def out(fd):
    while True:
        os.write(fd, b)
threading.Thread(target=out, args=(2,), daemon=True).start()
out(1)
`
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		var events atomic.Int64
		s := startSession(t, e, SessionSpec{OnEvent: func(ev *envelope.Event) { events.Add(int64(len(ev.Data))) }})
		for range 3 {
			r, err := call(t.Context(), s, ask{Op: sessionapi.OpExec, Cmd: []string{"python3", "-c", flood}, Background: true})
			if err != nil {
				t.Fatal(err)
			}
			okReply(t, r)
		}
		// gVisor's I/O under a loaded suite took over 30 s to carry 8 MiB
		// once (the test alone: under a second); the replies below are
		// what must come within seconds.
		testutil.Eventually(t, 90*time.Second, "the flood", func() bool {
			select {
			case <-s.Done():
				return true
			default:
				return events.Load() > 8<<20
			}
		})
		if sessionEnded(s) {
			t.Fatalf("the session ended during the flood (%q)", s.Why())
		}
		var worst time.Duration
		for i := range 10 {
			start := time.Now()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			r, err := call(ctx, s, ask{Op: sessionapi.OpExec, Shell: fmt.Sprintf("echo %d", i)})
			cancel()
			if err != nil {
				t.Fatalf("call %d during the flood: %v", i, err)
			}
			if r.Exit == nil || *r.Exit != 0 || string(r.Stdout) != fmt.Sprintf("%d\n", i) {
				t.Fatalf("call %d during the flood: %+v", i, r)
			}
			worst = max(worst, time.Since(start))
		}
		t.Logf("during a flood of %d MiB of events, the slowest of 10 round trips: %s", events.Load()>>20, worst)
		if worst > 5*time.Second {
			t.Errorf("a round trip took %s during the flood, want under 5s", worst)
		}
	})
}

// A cell can write what it likes on its context's answer pipe (fd 4):
// lines that are not JSON, answers with made-up nonces, a line with no
// end. The agent takes its cell's answer by its nonce, and the next
// cell's answer is that cell's.
func TestIntegrationSessionRedTeamContextPipe(t *testing.T) {
	t.Parallel()
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		s := startSession(t, e, SessionSpec{})
		garbage := `import os, json
os.write(4, b"not json\n")
for n in ("", "0" * 24, "x"):
    os.write(4, (json.dumps({"nonce": n, "text": "'forged'"}) + "\n").encode())
os.write(4, b'{"nonce": "half a line')
40 + 1`
		r := okReply(t, do(t, s, ask{Op: sessionapi.OpCode, Code: garbage, Timeout: ms(10000)}))
		if r.Text != "41" || r.TimedOut || r.CodeError != nil {
			t.Fatalf("the garbage cell: text %q timed out %v error %+v, want 41", r.Text, r.TimedOut, r.CodeError)
		}
		r = okReply(t, do(t, s, ask{Op: sessionapi.OpCode, Code: "'next'", Timeout: ms(10000)}))
		if r.Text != "'next'" || r.Reset || r.CodeError != nil {
			t.Fatalf("the next cell: %+v %+v, want 'next' in the same context", r, r.CodeError)
		}
	})
}

// runscFull reports whether the session ended under runsc with its trees
// full: gVisor keeps a tmpfs in the sandbox's memory, so filling /tmp and
// /workspace may take the sandbox to its memory limit.
func runscFull(t *testing.T, e *Executor, s *Session) bool {
	if !sessionEnded(s) {
		return false
	}
	if e.cfg.Runtime != "runsc" {
		t.Fatalf("the session ended (%q)", s.Why())
	}
	t.Logf("under runsc the full trees ended the sandbox (%q)", s.Why())
	return true
}

// sessionEnded says whether s has ended.
func sessionEnded(s *Session) bool {
	select {
	case <-s.Done():
		return true
	default:
		return false
	}
}

// One session's code sees nothing of another's: not its processes, not
// its files, and no network to reach its worker's NATS or anything else
// on the host (the session's control channel is its container's stdin,
// which only its worker holds).
func TestIntegrationSessionRedTeamIsolation(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		victim := startSession(t, e, SessionSpec{})
		okReply(t, do(t, victim, ask{Op: sessionapi.OpWrite, Path: "/tmp/secret-of-victim", Data: []byte("s3cret")}))
		okReply(t, do(t, victim, ask{Op: sessionapi.OpExec, Cmd: []string{"sleep", "3600"}, Background: true, Env: map[string]string{"MARK": "secret-of-victim"}}))
		spy := startSession(t, e, SessionSpec{})
		look := fmt.Sprintf(`import os, socket
seen = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            seen.append(open("/proc/" + p + "/cmdline", "rb").read().replace(b"\0", b" ").decode())
        except OSError:
            pass
print("procs", len(seen), "victim's", ("sle" + "ep 36" + "00") in " ".join(seen))
found = [os.path.join(d, f) for top in ("/tmp", "/workspace", "/dev/shm") for d, _, fs in os.walk(top) for f in fs if "victim" in f]
print("files", found)
for host in ("172.17.0.1", "127.0.0.1", "10.0.2.2", "host.docker.internal"):
    try:
        socket.create_connection((host, %d), timeout=2).close()
        print("reached", host)
    except OSError as err:
        print("unreachable", host)
print("ifaces", sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]))
`, port)
		r := okReply(t, do(t, spy, ask{Op: sessionapi.OpExec, Cmd: []string{"python3", "-c", look}}))
		out := string(r.Stdout)
		t.Logf("the spy saw:\n%s%s", out, r.Stderr)
		if r.Exit == nil || *r.Exit != 0 {
			t.Fatalf("the spy: exit %v stderr %q", r.Exit, r.Stderr)
		}
		if !strings.Contains(out, "victim's False\n") || !strings.Contains(out, "files []\n") || strings.Contains(out, "reached") ||
			!strings.Contains(out, "ifaces ['lo']\n") {
			t.Errorf("the spy reached the victim or the host:\n%s", out)
		}
	})
}

// Under gVisor a session's code can write frames on the agent's stdout
// (/proc/1/fd/1): reply parts that no last part ever finishes, for a
// thousand ids. None is checked before its last part, so the worker must
// not keep them: what it holds of the session stays bounded, or the
// session ends as broken. Not parallel: the heap it measures is the test
// binary's.
func TestIntegrationSessionRedTeamReplyParts(t *testing.T) {
	attack := `import os, struct, errno
try:
    fd = os.open("/proc/1/fd/1", os.O_WRONLY)
except OSError as err:
    print("denied", err.errno)
    raise SystemExit(0)
chunk = b"x" * (3 << 10)  # a frame of under PIPE_BUF: written whole
n = 0
for part in range(64):
    for i in range(1, 1025):
        p = struct.pack(">Q", i) + chunk
        b = b"p" + struct.pack(">I", len(p)) + p
        while b:
            b = b[os.write(fd, b):]
        n += len(p)
print("wrote", n)
`
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		s := startSession(t, e, SessionSpec{})
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
		defer cancel()
		r, err := call(ctx, s, ask{Op: sessionapi.OpExec, Cmd: []string{"python3", "-c", attack}})
		switch {
		case err == ErrSessionEnded:
			t.Logf("the session ended (%q)", s.Why())
			if s.Why() != "broken" {
				t.Errorf("the session ended as %q, want broken", s.Why())
			}
		case err != nil:
			t.Fatal(err)
		default:
			t.Logf("the attack: exit %v, said %q %q", derefInt(r.Exit), r.Stdout, r.Stderr)
		}
		var after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&after)
		grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		t.Logf("the worker's heap grew by %d MiB", grown>>20)
		if grown > 64<<20 {
			t.Errorf("the worker holds %d MiB more after the sandbox wrote reply parts, want under 64 MiB", grown>>20)
		}
	})
}

// A session's code makes a FIFO, and a symlink to one, where the owner's
// file calls look: opening a FIFO waits for its other end, so a read, a
// write or a listing of it would hold the call, and one of the agent's
// requests, for ever. Each is an honest error at once, and the session
// serves on.
func TestIntegrationSessionRedTeamFIFO(t *testing.T) {
	t.Parallel()
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		s := startSession(t, e, SessionSpec{})
		r, err := call(t.Context(), s, ask{Op: sessionapi.OpExec, Shell: "mkfifo pipe && ln -s pipe link && mkfifo /tmp/pipe"})
		if err != nil {
			t.Fatal(err)
		}
		r = okReply(t, r)
		if r.Exit == nil || *r.Exit != 0 {
			t.Fatalf("mkfifo: exit %v stderr %q", derefInt(r.Exit), r.Stderr)
		}
		for _, req := range []ask{
			{Op: sessionapi.OpRead, Path: "pipe"},
			{Op: sessionapi.OpRead, Path: "link"},
			{Op: sessionapi.OpRead, Path: "/tmp/pipe"},
			{Op: sessionapi.OpWrite, Path: "pipe", Data: []byte("x")},
			{Op: sessionapi.OpWrite, Path: "link", Data: []byte("x"), Append: true},
			{Op: sessionapi.OpList, Path: "pipe"},
		} {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			r, err := call(ctx, s, req)
			cancel()
			if err != nil {
				t.Fatalf("%s %s: %v: the agent waits on the FIFO", req.Op, req.Path, err)
			}
			if r.Error == nil {
				t.Fatalf("%s %s: no error, want one for a FIFO", req.Op, req.Path)
			}
			t.Logf("%s %s: %v", req.Op, req.Path, r.Error)
		}
		r, err = call(t.Context(), s, ask{Op: sessionapi.OpExec, Shell: "echo on"})
		if err != nil {
			t.Fatal(err)
		}
		if r := okReply(t, r); string(r.Stdout) != "on\n" {
			t.Fatalf("after the FIFOs: %q", r.Stdout)
		}
	})
}

// A cell's value and error are as long as the cell likes (a repr of 20
// MiB, an exception's message of 4): the reply carries each up to
// the output limit, and the session serves on, where a reply over a
// message's bound would end it.
func TestIntegrationSessionRedTeamHugeCell(t *testing.T) {
	t.Parallel()
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		s := startSession(t, e, SessionSpec{OutputLimit: 64 << 10})
		for _, code := range []string{"'x' * (20 << 20)", "raise ValueError('y' * (4 << 20))"} {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			r, err := call(ctx, s, ask{Op: sessionapi.OpCode, Code: code, Timeout: ms(50000)})
			cancel()
			if err == ErrSessionEnded && e.cfg.Runtime == "runsc" && s.Why() != "broken" {
				// gVisor counts the copies of the value the interpreter
				// makes against the sandbox's memory: an honest end.
				t.Logf("under runsc the sandbox ended (%q)", s.Why())
				return
			}
			if err != nil {
				t.Fatalf("%s: %v (the session ended as %q)", code, err, sessionWhy(s))
			}
			okReply(t, r)
			n := len(r.Text)
			if r.CodeError != nil {
				n = max(len(r.CodeError.Value), len(r.CodeError.Traceback))
			}
			if n == 0 || n > 64<<10 {
				t.Fatalf("%s: %d bytes of value or error, want 1 to 64 KiB", code, n)
			}
		}
		if r := okReply(t, do(t, s, ask{Op: sessionapi.OpCode, Code: "6*7"})); r.Text != "42" {
			t.Fatalf("the next cell: %+v", r)
		}
	})
}

// sessionWhy is why s ended, or "" while it runs.
func sessionWhy(s *Session) string {
	select {
	case <-s.Done():
		return s.Why()
	default:
		return ""
	}
}

// A background process that never reads its stdin is given more than its
// pipe holds to start with: the start is answered all the same (its
// pid), as a foreground command's is, and the process can be signalled.
func TestIntegrationSessionRedTeamUnreadStdin(t *testing.T) {
	t.Parallel()
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		s := startSession(t, e, SessionSpec{})
		ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
		defer cancel()
		r, err := call(ctx, s, ask{Op: sessionapi.OpExec, Cmd: []string{"sleep", "600"}, Background: true,
			Stdin: strings.Repeat("x", 1<<20)})
		if err != nil {
			t.Fatalf("a background start with 1 MiB of stdin it never reads: %v", err)
		}
		okReply(t, r)
		okReply(t, do(t, s, ask{Op: sessionapi.OpSignal, PID: r.PID, Signal: 9}))
		// What a start gives and what comes after keep their order.
		cat := okReply(t, do(t, s, ask{Op: sessionapi.OpExec, Cmd: []string{"cat"}, Background: true, Stdin: "first "}))
		okReply(t, do(t, s, ask{Op: sessionapi.OpStdin, PID: cat.PID, Data: []byte("then"), EOF: true}))
		w := okReply(t, do(t, s, ask{Op: sessionapi.OpProcess, PID: cat.PID, Wait: ms(30000)}))
		if string(w.Output) != "first then" {
			t.Fatalf("cat's output: %q, want %q", w.Output, "first then")
		}
	})
}

// A command past its timeout is killed by its process group; one that
// moved itself into another group of the session (a background
// process's) must be killed all the same: the call ends timed out, not
// never.
func TestIntegrationSessionRedTeamLeaveGroup(t *testing.T) {
	t.Parallel()
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		s := startSession(t, e, SessionSpec{})
		bg := okReply(t, do(t, s, ask{Op: sessionapi.OpExec, Cmd: []string{"sleep", "600"}, Background: true}))
		leave := fmt.Sprintf("import os, time\nos.setpgid(0, %d)\nprint('moved', flush=True)\ntime.sleep(600)\n", bg.PID)
		ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
		defer cancel()
		r, err := call(ctx, s, ask{Op: sessionapi.OpExec, Cmd: []string{"python3", "-c", leave}, Timeout: ms(3000)})
		if err != nil {
			t.Fatalf("a command that left its process group, past its timeout: %v", err)
		}
		okReply(t, r)
		t.Logf("stdout %q stderr %q", r.Stdout, r.Stderr)
		if !r.TimedOut {
			t.Fatalf("timed out %v, exit %v: want timed out", r.TimedOut, derefInt(r.Exit))
		}
		// A background process that did the same is signalled all the
		// same.
		ctx, cancel = context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		mr, err := call(ctx, s, ask{Op: sessionapi.OpExec, Cmd: []string{"python3", "-c", leave}, Background: true})
		if err != nil {
			t.Fatal(err)
		}
		mover := okReply(t, mr)
		ended := false
		testutil.Eventually(t, 30*time.Second, "the process to move", func() bool {
			r, err := call(t.Context(), s, ask{Op: sessionapi.OpProcess, PID: mover.PID})
			if err == ErrSessionEnded {
				ended = true
				return true
			}
			if err != nil {
				t.Fatal(err)
			}
			return strings.Contains(string(r.Output), "moved")
		})
		if ended {
			t.Fatalf("the session ended (%q)", s.Why())
		}
		okReply(t, do(t, s, ask{Op: sessionapi.OpSignal, PID: mover.PID, Signal: 9}))
		w := okReply(t, do(t, s, ask{Op: sessionapi.OpProcess, PID: mover.PID, Wait: ms(20000)}))
		if w.Running || w.Signal != 9 {
			t.Fatalf("the moved process after its SIGKILL: running %v signal %d", w.Running, w.Signal)
		}
	})
}

// A background process that exits, leaving a child that holds its
// output pipes, is waited for as it is: the wait answers with its exit
// status (what the pipes held within the grace), not when the child ends.
func TestIntegrationSessionRedTeamWaitOrphan(t *testing.T) {
	t.Parallel()
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		s := startSession(t, e, SessionSpec{})
		bg := okReply(t, do(t, s, ask{Op: sessionapi.OpExec, Shell: "sleep 600 & echo left; exit 3", Background: true}))
		ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
		defer cancel()
		w, err := call(ctx, s, ask{Op: sessionapi.OpProcess, PID: bg.PID, Wait: ms(10000)})
		if err != nil {
			t.Fatalf("the wait: %v", err)
		}
		okReply(t, w)
		if w.Running || w.Exit == nil || *w.Exit != 3 || string(w.Output) != "left\n" {
			t.Fatalf("the wait: running %v exit %v output %q, want exit 3 and %q", w.Running, derefInt(w.Exit), w.Output, "left\n")
		}
	})
}
