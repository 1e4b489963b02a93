package executor

// A harness grades an agent's work by running a verifier in the agent's
// own session. The session's processes run as the verifier's uid, so one
// left running may open /proc/<pid>/fd/1 of the verifier and write into
// its stdout: the verdict is forged. An exclusive exec kills every other
// process first and starts none until the verifier ends; these tests run
// the forgery for real, under every runtime the engine offers.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// forger watches /proc for a process whose command line holds the
// verifier's mark, and writes a passing verdict into its stdout. With
// "bg" it also leaves forgers the agent never started: a daemon in a
// session of its own, a stopped one, one that forks flat out, a zombie.
const forger = `import os, sys, time, signal
MARK = b"veri" + b"fy-me"
def forge(tag):
    me, done = os.getpid(), set()
    open("/tmp/ready-" + tag, "w").close()
    while True:
        for p in os.listdir("/proc"):
            if not p.isdigit() or int(p) in done or int(p) == me:
                continue
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    if MARK not in f.read():
                        continue
                fd = os.open("/proc/%s/fd/1" % p, os.O_WRONLY | os.O_NONBLOCK)
                os.write(fd, b"FORGED by " + tag.encode() + b": all tests passed\n")
                os.close(fd)
                done.add(int(p))
            except OSError:
                pass
        time.sleep(0.002)
def child(f):
    if os.fork() == 0:
        os.setsid()
        f()
        os._exit(0)
def daemon():
    if os.fork() == 0:
        forge("daemon")
    os._exit(0)
def stopped():
    os.kill(os.getpid(), signal.SIGSTOP)
    forge("stopped")
def spinner():
    while True:
        try:
            if os.fork() == 0:
                os._exit(0)
            os.wait()
        except OSError:
            pass
if __name__ == "__main__":
    tag = sys.argv[1]
    if tag == "bg":
        child(daemon)
        child(stopped)
        child(spinner)
    forge(tag)
`

// verifier is what a harness runs to grade: it fails, and says so.
const (
	verifier    = "sleep 0.5; echo 'verifier: 3 failed'; exit 1 # verify-me"
	verifierOut = "verifier: 3 failed\n"
)

// Every round: forgers as a background process (with its untracked
// descendants), a terminal and a code context's child; a plain exec of
// the verifier reads FORGED (the hole), an exclusive one reads its own
// output and status, having ended them all.
func TestIntegrationSessionRedTeamVerdict(t *testing.T) {
	t.Parallel()
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		s := startSession(t, e, SessionSpec{})
		for round := range 3 {
			plantForgers(t, s, round)
			forged := false
			for try := 0; try < 5 && !forged; try++ {
				r := okReply(t, do(t, s, ask{Op: sessionapi.OpExec, Shell: verifier}))
				forged = strings.Contains(string(r.Stdout), "FORGED")
				t.Logf("round %d, a plain exec: exit %v stdout %q", round, derefInt(r.Exit), r.Stdout)
			}
			if !forged {
				t.Errorf("round %d: no plain exec was forged; the attack no longer works as this test expects", round)
			}
			r := okReply(t, do(t, s, ask{Op: sessionapi.OpExec, Shell: verifier, Exclusive: true}))
			t.Logf("round %d, an exclusive exec: exit %v stdout %q, %d processes ended", round, derefInt(r.Exit), r.Stdout, r.Ended)
			if string(r.Stdout) != verifierOut || r.Exit == nil || *r.Exit != 1 || !r.Exclusive {
				t.Fatalf("round %d: exclusive exec: exit %v stdout %q exclusive %v, want 1, %q and true",
					round, derefInt(r.Exit), r.Stdout, r.Exclusive, verifierOut)
			}
			// The background forger, the daemon, the stopped one, the
			// spinner, the terminal's and the context's interpreters.
			if r.Ended < 6 {
				t.Errorf("round %d: %d processes ended, want at least 6", round, r.Ended)
			}
			wantForgersEnded(t, s, round)
		}
	})
}

// plantForgers starts the forgers of a round and waits until each
// watches /proc.
func plantForgers(t *testing.T, s *Session, round int) {
	t.Helper()
	for _, f := range []string{"bg", "daemon", "pty", "ctx"} {
		do(t, s, ask{Op: sessionapi.OpRemove, Path: "/tmp/ready-" + f})
	}
	okReply(t, do(t, s, ask{Op: sessionapi.OpExec, Background: true, Cmd: []string{"python3", "-c", forger, "bg"}}))
	okRaw(t, doRaw(t, s, envelope.Request{Op: envelope.OpPTYOpen, Argv: []string{"python3", "-c", forger, "pty"}}))
	// A fork of the context's interpreter, not a thread: gVisor here
	// starts no thread in a sandbox.
	c := okReply(t, do(t, s, ask{Op: sessionapi.OpCode, Code: "import os\nsrc = " + pyQuote(forger) +
		"\nns = {'__name__': 'forger'}\nexec(src, ns)\nif os.fork() == 0:\n    ns['forge']('ctx')"}))
	if c.CodeError != nil {
		t.Fatalf("round %d: the context's forger: %+v", round, c.CodeError)
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, f := range []string{"bg", "daemon", "pty", "ctx"} {
		for {
			r := do(t, s, ask{Op: sessionapi.OpStat, Path: "/tmp/ready-" + f})
			if r.Error == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: forger %s not ready: %v", round, f, r.Error)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// wantForgersEnded: the agent's own view agrees that what it started is
// gone: the background forger ended by SIGKILL, the context starts afresh.
func wantForgersEnded(t *testing.T, s *Session, round int) {
	t.Helper()
	ps := okReply(t, do(t, s, ask{Op: sessionapi.OpProcesses}))
	for _, p := range ps.Processes {
		if p.Running || p.Signal != 9 {
			t.Errorf("round %d: background process %d %v: running %v signal %d, want ended by 9", round, p.PID, p.Cmd[:2], p.Running, p.Signal)
		}
		do(t, s, ask{Op: sessionapi.OpProcess, PID: p.PID, Wait: ms(30000)}) // collected
	}
	c := okReply(t, do(t, s, ask{Op: sessionapi.OpCode, Code: "1 + 1"}))
	if !c.Reset || c.Text != "2" {
		t.Errorf("round %d: the context after an exclusive exec: reset %v text %q, want a fresh one", round, c.Reset, c.Text)
	}
}

// pyQuote is s as a Python string literal.
func pyQuote(s string) string {
	return `"""` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"""`, `\"\"\"`) + `"""`
}

// While an exclusive command runs nothing else starts (a command, a
// background process, a terminal, a context, a second exclusive one):
// each is refused, and runs again once it has ended. Background and
// exclusive together are refused.
func TestIntegrationSessionExclusiveAlone(t *testing.T) {
	t.Parallel()
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		s := startSession(t, e, SessionSpec{})
		r := do(t, s, ask{Op: sessionapi.OpExec, Shell: "true", Exclusive: true, Background: true})
		if r.Error == nil || r.Error.Code != sessionapi.ErrInvalid.Code {
			t.Fatalf("exclusive and background: %+v, want invalid", r.Error)
		}
		done := make(chan *answer, 1)
		go func() {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			// It ends when /tmp/alone is removed (a file call starts no process).
			r, err := call(ctx, s, ask{Op: sessionapi.OpExec, Exclusive: true, Timeout: ms(60000),
				Shell: "touch /tmp/alone; while [ -e /tmp/alone ]; do sleep 0.05; done; echo done"})
			if err != nil {
				r = &answer{Error: &sessionapi.Error{Code: "do", Message: err.Error()}}
			}
			done <- r
		}()
		deadline := time.Now().Add(30 * time.Second)
		for do(t, s, ask{Op: sessionapi.OpStat, Path: "/tmp/alone"}).Error != nil {
			if time.Now().After(deadline) {
				t.Fatal("the exclusive command did not start")
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, req := range []ask{
			{Op: sessionapi.OpExec, Shell: "echo no"},
			{Op: sessionapi.OpExec, Shell: "echo no", Background: true},
			{Op: sessionapi.OpExec, Shell: "echo no", Exclusive: true},
			{Op: envelope.OpPTYOpen},
			{Op: sessionapi.OpCode, Code: "1"},
		} {
			r := do(t, s, req)
			if r.Error == nil || !strings.Contains(r.Error.Message, "exclusive command is running") {
				t.Errorf("%s (background %v, exclusive %v) beside an exclusive command: error %v, want refused",
					req.Op, req.Background, req.Exclusive, r.Error)
			}
		}
		ps := do(t, s, ask{Op: sessionapi.OpProcesses})
		if len(ps.Processes) != 0 {
			t.Errorf("background processes beside an exclusive command: %+v", ps.Processes)
		}
		select {
		case r := <-done:
			t.Fatalf("the exclusive command ended early: %+v", r)
		default:
		}
		okReply(t, do(t, s, ask{Op: sessionapi.OpRemove, Path: "/tmp/alone"}))
		r = <-done
		if r.Error != nil || r.Exit == nil || *r.Exit != 0 || string(r.Stdout) != "done\n" || !r.Exclusive {
			t.Fatalf("the exclusive command: exit %v stdout %q exclusive %v error %v", derefInt(r.Exit), r.Stdout, r.Exclusive, r.Error)
		}
		r = okReply(t, do(t, s, ask{Op: sessionapi.OpExec, Shell: "echo again"}))
		if string(r.Stdout) != "again\n" {
			t.Fatalf("a command after the exclusive one: %q", r.Stdout)
		}
	})
}
