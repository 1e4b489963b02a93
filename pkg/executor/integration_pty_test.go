package executor

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/testutil"
)

// A terminal in a session: a shell on a real pty, its output as events,
// what is typed reaches it, a resize changes what `stty size` says, and
// its end is reported with the shell's status once the terminal is
// drained.
func TestSessionPTY(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
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
	seen := func(want string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return strings.Contains(out.String(), want)
		}
	}
	r := okReply(t, do(t, s, envelope.Request{Op: envelope.OpPTYOpen, Cols: 80, Rows: 24}))
	if r.PTY == 0 || r.PID == 0 {
		t.Fatalf("pty_open: %+v", r)
	}
	n := r.PTY
	okReply(t, do(t, s, envelope.Request{Op: envelope.OpPTYInput, PTY: n, Data: []byte("echo hel''lo\n")}))
	testutil.Eventually(t, 20*time.Second, "hello from the pty", seen("hello\r\n"))

	okReply(t, do(t, s, envelope.Request{Op: envelope.OpPTYResize, PTY: n, Cols: 101, Rows: 33}))
	okReply(t, do(t, s, envelope.Request{Op: envelope.OpPTYInput, PTY: n, Data: []byte("stty size\n")}))
	testutil.Eventually(t, 20*time.Second, "the new size", seen("33 101"))

	if r := do(t, s, envelope.Request{Op: envelope.OpPTYResize, PTY: n, Cols: 0, Rows: 5}); r.Error == nil || r.Error.Code != envelope.ErrCodeInvalid {
		t.Fatalf("a 0-column resize: %+v", r.Error)
	}
	if r := do(t, s, envelope.Request{Op: envelope.OpPTYInput, PTY: n + 7}); r.Error == nil || r.Error.Code != envelope.ErrCodeNotFound {
		t.Fatalf("input to no terminal: %+v", r.Error)
	}

	okReply(t, do(t, s, envelope.Request{Op: envelope.OpPTYInput, PTY: n, Data: []byte("exit 7\n")}))
	testutil.Eventually(t, 20*time.Second, "the terminal's end", func() bool {
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
