package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/sessionhost"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
)

// `submit session attach` on a real terminal, on real Docker: the shell
// starts at the terminal's size, the local terminal is raw while
// attached (no local echo, no line editing) and restored after, a resize
// of it (SIGWINCH) reaches the shell, and attach exits as the shell does.
// With stdin piped, what is piped runs and its end ends the shell.
func TestSessionAttachDocker(t *testing.T) {
	cfg := executor.Config{WorkerID: fmt.Sprintf("sess-attach-%d", os.Getpid())}
	if img := os.Getenv("SANDFLEET_TEST_IMAGE"); img != "" {
		cfg.Presets = map[string]executor.Preset{"python": {Image: img, MainFile: "main.py", Argv: []string{"python3", "main.py"}}}
	}
	exec := workertest.Sandbox(t, cfg)
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	host, err := sessionhost.New(t.Context(), js, func(ctx context.Context, s sessionhost.StartSpec) (sessionhost.Sandbox, error) {
		return exec.StartSession(ctx, executor.SessionSpec{ID: s.ID, Image: s.Image, Limits: s.Limits, Lifetime: s.Lifetime, OnEvent: s.OnEvent})
	}, sessionhost.Config{Worker: "attach", Limits: exec.ResolveLimits, Images: exec.HasPreset})
	if err != nil {
		t.Fatal(err)
	}
	hctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- host.Run(hctx) }()
	defer func() { stop(); <-done }()
	cli := func(stdin string, args ...string) out {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		var o, e bytes.Buffer
		code := runCLI(ctx, append([]string{"--nats", srv.ClientURL()}, args...), strings.NewReader(stdin), &o, &e)
		return out{code, o.String(), e.String()}
	}
	var id string
	testutil.Eventually(t, 60*time.Second, "a session created (once the host listens)", func() bool {
		r := cli("", "session", "create")
		id = strings.TrimSpace(r.stdout)
		return r.code == 0 && id != ""
	})

	if r := cli("echo pi''ped\nexit 4\n", "session", "attach", id); r.code != 4 || !strings.Contains(r.stdout, "piped") {
		t.Fatalf("attach with stdin piped: %+v, want exit 4 and its output", r)
	}

	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal on this machine: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if err := pty.Setsize(tty, &pty.Winsize{Rows: 30, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var screen strings.Builder
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	shows := func(want string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return strings.Contains(screen.String(), want)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	exited := make(chan int, 1)
	go func() {
		var e bytes.Buffer
		m := &Main{Stdin: tty, Stdout: tty, Stderr: &e, IsTerminal: isTerminal}
		exited <- exitCode(m.Run(ctx, []string{"--nats", srv.ClientURL(), "session", "attach", id}), &e)
	}()
	ptmx.Write([]byte("stty size\r"))
	testutil.Eventually(t, 30*time.Second, "the terminal's size in the shell", shows("30 100\r\n"))
	raw, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if raw.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG) != 0 {
		t.Fatalf("attached, the local terminal is not raw: lflag %#x", raw.Lflag)
	}

	if err := pty.Setsize(tty, &pty.Winsize{Rows: 50, Cols: 132}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the new size in the shell", func() bool {
		// Nothing here owns the terminal, so no kernel sends it the
		// SIGWINCH a resize sends its foreground; the test does.
		_ = syscall.Kill(os.Getpid(), syscall.SIGWINCH)
		ptmx.Write([]byte("stty size\r"))
		return testutil.Poll(ctx, time.Second, 20*time.Millisecond, func(context.Context) error {
			if !shows("50 132\r\n")() {
				return errors.New("not yet")
			}
			return nil
		}) == nil
	})
	ptmx.Write([]byte("exit 5\r"))
	select {
	case code := <-exited:
		if code != 5 {
			t.Fatalf("attach exited %d, want the shell's 5", code)
		}
	case <-ctx.Done():
		t.Fatal("attach did not end with its shell")
	}
	after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
		t.Fatalf("the terminal was not restored: %+v, was %+v", after, before)
	}
}
