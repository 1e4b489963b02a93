package executor

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

func startSession(t *testing.T, e *Executor, spec SessionSpec) *Session {
	t.Helper()
	if spec.Image == "" {
		spec.Image = "python"
	}
	if spec.ID == "" {
		spec.ID = "sess-" + randHex(4)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	s, err := e.StartSession(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// A session keeps what one call leaves for the next: a context's globals,
// files, a background server that a later command reaches on loopback;
// a cell that raises keeps its context, and a timed-out cell is
// interrupted without losing it.
func TestSessionKeepsState(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	var mu sync.Mutex
	var live strings.Builder
	s := startSession(t, e, SessionSpec{OnEvent: func(ev *envelope.Event) {
		mu.Lock()
		live.Write(ev.Data)
		mu.Unlock()
	}})

	r := okReply(t, do(t, s, ask{Op: sessionapi.OpCode, Code: "x = 41\nimport math"}))
	if !r.Reset || r.CodeError != nil || r.Text != "" {
		t.Fatalf("first cell: %+v", r)
	}
	r = okReply(t, do(t, s, ask{Op: sessionapi.OpCode, Code: "print('side', flush=True)\nx + 1"}))
	if r.Reset || r.Text != "42" || string(r.Stdout) != "side\n" {
		t.Fatalf("second cell: text %q stdout %q reset %v, want 42, side", r.Text, r.Stdout, r.Reset)
	}
	r = okReply(t, do(t, s, ask{Op: sessionapi.OpCode, Code: "def f():\n    return 1/0\nf()"}))
	if r.CodeError == nil || r.CodeError.Name != "ZeroDivisionError" || !strings.Contains(r.CodeError.Traceback, "line 2") {
		t.Fatalf("a raising cell: %+v", r.CodeError)
	}
	r = okReply(t, do(t, s, ask{Op: sessionapi.OpCode, Code: "math.floor(x / 2)"}))
	if r.Text != "20" || r.Reset {
		t.Fatalf("after the error: %+v, want 20 in the same context", r)
	}
	r = okReply(t, do(t, s, ask{Op: sessionapi.OpCode, Code: "import time\nwhile True: time.sleep(0.01)", Timeout: ms(500)}))
	if !r.TimedOut || r.CodeError == nil || r.CodeError.Name != "KeyboardInterrupt" {
		t.Fatalf("a cell past its timeout: %+v %+v", r, r.CodeError)
	}
	if r = okReply(t, do(t, s, ask{Op: sessionapi.OpCode, Code: "x"})); r.Text != "41" || r.Reset {
		t.Fatalf("after the interrupt: %+v, want 41 in the same context", r)
	}

	// Files written through the API are a command's, and the reverse.
	okReply(t, do(t, s, ask{Op: sessionapi.OpWrite, Path: "notes/a.txt", Data: []byte("hello\n")}))
	r = okReply(t, do(t, s, ask{Op: sessionapi.OpExec, Shell: "cat notes/a.txt; echo made > b.txt; echo err >&2; exit 3"}))
	if r.Exit == nil || *r.Exit != 3 || string(r.Stdout) != "hello\n" || string(r.Stderr) != "err\n" {
		t.Fatalf("exec: exit %v stdout %q stderr %q", r.Exit, r.Stdout, r.Stderr)
	}
	if r = okReply(t, do(t, s, ask{Op: sessionapi.OpRead, Path: "/workspace/b.txt"})); string(r.Data) != "made\n" || !r.EOF {
		t.Fatalf("read: %q eof %v", r.Data, r.EOF)
	}
	r = okReply(t, do(t, s, ask{Op: sessionapi.OpList, Path: "."}))
	var names []string
	for _, en := range r.Entries {
		names = append(names, en.Name+":"+en.Type)
	}
	if got := strings.Join(names, ","); !strings.Contains(got, "notes:dir") || !strings.Contains(got, "b.txt:file") {
		t.Errorf("list: %s", got)
	}
	if r := do(t, s, ask{Op: sessionapi.OpRead, Path: "/etc/passwd"}); r.Error == nil || r.Error.Code != sessionapi.ErrInvalid.Code {
		t.Errorf("a read outside the tree: %+v", r.Error)
	}
	if r := do(t, s, ask{Op: sessionapi.OpRead, Path: "nope"}); r.Error == nil || r.Error.Code != sessionapi.ErrNotFound.Code {
		t.Errorf("a read of nothing: %+v", r.Error)
	}

	// A server started in the background answers a later command.
	bg := okReply(t, do(t, s, ask{Op: sessionapi.OpExec, Cmd: []string{"python3", "-m", "http.server", "8765", "--bind", "127.0.0.1"}, Background: true}))
	if bg.PID <= 1 {
		t.Fatalf("background: pid %d", bg.PID)
	}
	fetch := `import urllib.request,sys
for i in range(200):
    try:
        print(urllib.request.urlopen("http://127.0.0.1:8765/b.txt").read().decode(), end=""); break
    except OSError:
        import time; time.sleep(0.05)
else:
    sys.exit(1)`
	r = okReply(t, do(t, s, ask{Op: sessionapi.OpExec, Cmd: []string{"python3", "-c", fetch}}))
	if string(r.Stdout) != "made\n" {
		t.Fatalf("the server's answer: %q (stderr %q)", r.Stdout, r.Stderr)
	}
	r = okReply(t, do(t, s, ask{Op: sessionapi.OpProcesses}))
	if len(r.Processes) != 1 || r.Processes[0].PID != bg.PID || !r.Processes[0].Running {
		t.Fatalf("processes: %+v", r.Processes)
	}
	okReply(t, do(t, s, ask{Op: sessionapi.OpSignal, PID: bg.PID}))
	r = okReply(t, do(t, s, ask{Op: sessionapi.OpProcess, PID: bg.PID, Wait: ms(10000)}))
	if r.Exit == nil || r.Running || !strings.Contains(string(r.Output), "GET /b.txt") {
		t.Fatalf("wait: exit %v running %v output %q", r.Exit, r.Running, r.Output)
	}
	mu.Lock()
	got := live.String()
	mu.Unlock()
	if !strings.Contains(got, "hello\n") || !strings.Contains(got, "side\n") {
		t.Errorf("live output %q: want the exec's and the cell's", got)
	}
}

// A session whose executor stops renewing it (its worker hung or died)
// ends itself when its deadman runs out, and says so; one past its
// lifetime ends too.
func TestSessionEndsItself(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	for _, tc := range []struct {
		name string
		spec SessionSpec
		why  string
		act  func(*Session)
	}{
		{"deadman", SessionSpec{Deadman: 1500 * time.Millisecond}, "idle", (*Session).Abandon},
		{"lifetime", SessionSpec{Lifetime: 2 * time.Second}, "lifetime", func(*Session) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startSession(t, e, tc.spec)
			okReply(t, do(t, s, ask{Op: sessionapi.OpExec, Cmd: []string{"sleep", "1000"}, Background: true}))
			tc.act(s)
			testutil.Eventually(t, 30*time.Second, "the session's end", func() bool {
				select {
				case <-s.Done():
					return true
				default:
					return false
				}
			})
			if s.Why() != tc.why {
				t.Errorf("ended: %q, want %q", s.Why(), tc.why)
			}
			if _, err := s.Do(t.Context(), &envelope.Request{Op: envelope.OpPing}); err != ErrSessionEnded {
				t.Errorf("a call after the end: %v, want ErrSessionEnded", err)
			}
		})
	}
}
