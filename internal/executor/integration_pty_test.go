package executor

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// A terminal in a session: a shell on a real pty, its output as events,
// what is typed reaches it, a resize changes what `stty size` says, and
// its end is reported with the shell's status once the terminal is
// drained. Under runc and, where the engine has it, runsc.
func TestSessionPTY(t *testing.T) {
	t.Parallel()
	forEachRuntime(t, testSessionPTY)
}

func testSessionPTY(t *testing.T, e *Executor) {
	var mu sync.Mutex
	var out strings.Builder
	var exit *envelope.Event
	s := startSession(t, e, SessionSpec{OnEvent: func(ev *envelope.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch ev.Stream {
		case envelope.StreamPTY:
			out.Write(ev.Data)
		case envelope.StreamPTYExit:
			exit = ev
		}
	}})
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			t.Logf("the terminal showed %q", out.String())
			mu.Unlock()
		}
	})
	seen := func(want string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return strings.Contains(out.String(), want)
		}
	}
	r := okRaw(t, doRaw(t, s, envelope.Request{Op: envelope.OpPTYOpen, Cols: 80, Rows: 24}))
	if r.PTY == 0 || r.PID == 0 {
		t.Fatalf("pty_open: %+v", r)
	}
	n := r.PTY
	// Typed once the shell shows its prompt, as a person does.
	okRaw(t, doRaw(t, s, envelope.Request{Op: envelope.OpPTYInput, PTY: n}))
	testutil.Eventually(t, 20*time.Second, "the shell's prompt", seen("$ "))
	okRaw(t, doRaw(t, s, envelope.Request{Op: envelope.OpPTYInput, PTY: n, Data: []byte("echo hel''lo\n")}))
	testutil.Eventually(t, 20*time.Second, "hello from the pty", seen("hello\r\n"))

	okRaw(t, doRaw(t, s, envelope.Request{Op: envelope.OpPTYResize, PTY: n, Cols: 101, Rows: 33}))
	okRaw(t, doRaw(t, s, envelope.Request{Op: envelope.OpPTYInput, PTY: n, Data: []byte("stty size\n")}))
	testutil.Eventually(t, 20*time.Second, "the new size", seen("33 101"))

	if r := doRaw(t, s, envelope.Request{Op: envelope.OpPTYResize, PTY: n, Cols: 0, Rows: 5}); r.Error == nil || r.Error.Code != sessionapi.ErrInvalid.Code {
		t.Fatalf("a 0-column resize: %+v", r.Error)
	}
	if r := doRaw(t, s, envelope.Request{Op: envelope.OpPTYInput, PTY: n + 7}); r.Error == nil || r.Error.Code != sessionapi.ErrNotFound.Code {
		t.Fatalf("input to no terminal: %+v", r.Error)
	}

	okRaw(t, doRaw(t, s, envelope.Request{Op: envelope.OpPTYInput, PTY: n, Data: []byte("exit 7\n")}))
	testutil.Eventually(t, 90*time.Second, "the terminal's end", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return exit != nil
	})
	mu.Lock()
	defer mu.Unlock()
	if exit.PTY != n || exit.Exit == nil || *exit.Exit != 7 {
		t.Fatalf("pty_exit: %+v", exit)
	}
}

// A terminal's output waits for its reader: with nothing acknowledged,
// the agent sends PTYWindow bytes of a 2 MB burst and no more; once the
// reader acknowledges what it took, the rest comes.
func TestSessionPTYWindow(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	var mu sync.Mutex
	var got int64
	s := startSession(t, e, SessionSpec{OnEvent: func(ev *envelope.Event) {
		if ev.Stream == envelope.StreamPTY {
			mu.Lock()
			got += int64(len(ev.Data))
			mu.Unlock()
		}
	}})
	taken := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		return got
	}
	n := okRaw(t, doRaw(t, s, envelope.Request{Op: envelope.OpPTYOpen, Argv: []string{"/bin/sh", "-c", "head -c 2000000 /dev/zero | tr '\\0' x; echo; echo END"}})).PTY
	okRaw(t, doRaw(t, s, envelope.Request{Op: envelope.OpPTYInput, PTY: n}))
	testutil.Eventually(t, 20*time.Second, "a window's worth of output", func() bool { return taken() >= envelope.PTYWindow })
	// The invariant, checked again after a round trip through the agent
	// (one more request served while the shell still had output to give).
	okRaw(t, doRaw(t, s, envelope.Request{Op: envelope.OpPTYResize, PTY: n, Cols: 80, Rows: 24}))
	if sent := taken(); sent != envelope.PTYWindow {
		t.Fatalf("with nothing acknowledged the agent sent %d bytes, want the window's %d", sent, envelope.PTYWindow)
	}
	testutil.Eventually(t, 60*time.Second, "the whole burst once acknowledged", func() bool {
		r := doRaw(t, s, envelope.Request{Op: envelope.OpPTYInput, PTY: n, Acked: taken()})
		if r.Error != nil {
			return r.Error.Code == sessionapi.ErrNotFound.Code // ended: all sent
		}
		return false
	})
	if sent := taken(); sent < 2000000 {
		t.Fatalf("the burst: %d bytes, want 2000000 and more", sent)
	}
}
