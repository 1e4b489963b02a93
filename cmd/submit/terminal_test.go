package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/term"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// A job that tries to take over the terminal of whoever reads its output:
// set the window title (OSC 0), clear the screen, write the clipboard (OSC
// 52), and overwrite its own FAILED line with a line of its choosing; on
// stderr, a C1 CSI and a right-to-left override.
const (
	attackCode = "print \x1b]0;TITLE\x07\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07FAILED\r\x1b[Kfake: all tests passed\n" +
		"eprint \u009b31m\u202edeliaf\nexit 1"
	attackStdout = "\x1b]0;TITLE\x07\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07FAILED\r\x1b[Kfake: all tests passed\n"
	attackStderr = "\u009b31m\u202edeliaf\n"
	shownStdout  = "^[]0;TITLE^G^[[2J^[]52;c;cm0gLXJmIH4=^GFAILED^M^[[Kfake: all tests passed\n"
	shownStderr  = `\u009b31m\u202edeliaf` + "\n"
)

// openTerminal returns a pseudo-terminal in raw mode (no \n to \r\n, so
// what arrives is what was written) and a func that closes it and returns
// all that was written to it.
func openTerminal(t *testing.T) (*os.File, func() string) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal on this machine (%v); TestJobOutputTerminalDecision covers the decision", err)
	}
	t.Cleanup(func() { ptmx.Close(); tty.Close() })
	if _, err := term.MakeRaw(int(tty.Fd())); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(&got, ptmx)
		done <- err
	}()
	return tty, func() string {
		tty.Close()
		// Linux reports the closed other end as EIO, once all is read.
		if err := <-done; err != nil && !errors.Is(err, syscall.EIO) {
			t.Errorf("read the terminal: %v", err)
		}
		return got.String()
	}
}

// runOn runs submit with stdout and stderr on w, telling a terminal as
// main does (isTerminal).
func runOn(t *testing.T, w io.Writer, args ...string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	m := &Main{Stdin: strings.NewReader(""), Stdout: w, Stderr: w}
	return exitCode(m.Run(ctx, args), w)
}

// The attack through a real terminal: run, get and wait show the escape
// sequences instead of writing them; --raw writes them; --json stays
// JSON with nothing a terminal acts on.
func TestJobOutputOnTerminal(t *testing.T) {
	t.Parallel()
	url := setup(t, false)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"run", []string{"run", "--id", "tty-1", "-c", attackCode}, shownStdout + shownStderr},
		{"get", []string{"get", "tty-1"}, shownStdout + shownStderr},
		{"wait", []string{"wait", "tty-1"}, shownStdout + shownStderr},
		{"run --raw", []string{"run", "--id", "tty-1", "-c", attackCode, "--raw"}, attackStdout + attackStderr},
	} {
		tty, written := openTerminal(t)
		code := runOn(t, tty, append(tc.args, "--nats", url)...)
		if got := written(); code != 1 || got != tc.want {
			t.Errorf("%s on a terminal: exit %d, wrote\n%q\nwant\n%q", tc.name, code, got, tc.want)
		}
	}

	tty, written := openTerminal(t)
	code := runOn(t, tty, "get", "tty-1", "--json", "--nats", url)
	got := written()
	var res jobs.Result
	if err := json.Unmarshal([]byte(got), &res); err != nil || code != 1 {
		t.Fatalf("get --json on a terminal: exit %d, %q: %v", code, got, err)
	}
	if strings.ContainsAny(got, "\x1b\x07\r\u009b\u202e") || res.Stdout != attackStdout || res.Stderr != attackStderr {
		t.Errorf("get --json on a terminal wrote %q", got)
	}
}

// Pipes and files get the job's bytes unchanged, the real terminal check
// included; the decision is made per stream, at the command's boundary.
func TestJobOutputTerminalDecision(t *testing.T) {
	t.Parallel()
	url := setup(t, false)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	piped := make(chan string)
	go func() {
		data, _ := io.ReadAll(r)
		piped <- string(data)
	}()
	code := runOn(t, w, "run", "--id", "pipe-1", "-c", attackCode, "--nats", url)
	w.Close()
	if got := <-piped; code != 1 || got != attackStdout+attackStderr {
		t.Errorf("to a pipe: exit %d, %q", code, got)
	}

	// Only stdout a terminal: stdout shown, stderr (a file) unchanged.
	var o, e bytes.Buffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &o, Stderr: &e,
		IsTerminal: func(w io.Writer) bool { return w == &o }}
	code = exitCode(m.Run(t.Context(), []string{"get", "pipe-1", "--nats", url}), &e)
	if code != 1 || o.String() != shownStdout || e.String() != attackStderr {
		t.Errorf("stdout a terminal: exit %d, stdout %q, stderr %q", code, o.String(), e.String())
	}
}
