package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/sessionhost"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
)

// A session through the CLI on real Docker: create, run Python twice in
// its context, exec a command that reads a file copied in, copy a file
// out, expose and unexpose ports, rm; then the session is gone (exit 1).
func TestSessionCLIDocker(t *testing.T) {
	t.Parallel()
	cfg := executor.Config{WorkerID: fmt.Sprintf("sess-cli-%d", os.Getpid())}
	if img := os.Getenv("SANDFLEET_TEST_IMAGE"); img != "" { // a branch's own launcher
		cfg.Presets = executor.DefaultPresets()
		p := cfg.Presets["python"]
		p.Image = img
		cfg.Presets["python"] = p
	}
	exec := workertest.Sandbox(t, cfg)
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	host, err := sessionhost.New(t.Context(), js, func(ctx context.Context, s sessionhost.StartSpec) (sessionhost.Sandbox, error) {
		return exec.StartSession(ctx, executor.SessionSpec{ID: s.ID, Image: s.Image, Limits: s.Limits, Lifetime: s.Lifetime})
	}, sessionhost.Config{Worker: "cli", Limits: exec.ResolveLimits, Images: exec.HasPreset})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- host.Run(ctx) }()
	defer func() { stop(); <-done }()

	cli := func(stdin string, args ...string) out {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		var o, e bytes.Buffer
		code := runCLI(ctx, append([]string{"--nats", srv.ClientURL()}, args...), strings.NewReader(stdin), &o, &e)
		return out{code, o.String(), e.String()}
	}
	// The host takes creates once Run has started listening.
	var r out
	testutil.Eventually(t, 30*time.Second, "a create taken", func() bool {
		r = cli("", "session", "create", "--idle-timeout", "2m")
		return r.code != exitUnavailable
	})
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("create: %+v", r)
	}
	if r := cli("", "session", "expose", id, "8000"); r.code != 0 || r.stdout != "8000\n" {
		t.Fatalf("expose: %+v, want 8000", r)
	}
	if r := cli("", "session", "expose", id, "3000"); r.code != 0 || r.stdout != "3000\n8000\n" {
		t.Fatalf("a second expose: %+v, want both ports", r)
	}
	if r := cli("", "session", "expose", id, "80"); r.code != exitUsage || !strings.Contains(r.stderr, "1024 to 65535") {
		t.Errorf("expose of port 80: %+v, want a usage error", r)
	}
	if r := cli("", "session", "unexpose", id, "8000"); r.code != 0 || r.stdout != "3000\n" {
		t.Fatalf("unexpose: %+v, want 3000 left", r)
	}
	if r := cli("", "session", "ports", id, "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[\n  3000\n]" && strings.TrimSpace(r.stdout) != "[3000]" {
		t.Errorf("ports --json: %+v, want [3000]", r)
	}
	if r := cli("", "session", "run", id, "-c", "n = 20"); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	if r := cli("print('side')\nn * 2 + 2\n", "session", "run", id, "-"); r.code != 0 || r.stdout != "side\n42\n" {
		t.Fatalf("run from stdin: %+v, want side and 42", r)
	}
	if r := cli("", "session", "run", id, "-c", "1/0"); r.code != 1 || !strings.Contains(r.stderr, "ZeroDivisionError") {
		t.Fatalf("a raising cell: %+v, want exit 1 and the traceback", r)
	}
	if r := cli("", "session", "cells", id); r.code != 0 || !strings.Contains(r.stdout, "[1] ") || !strings.Contains(r.stdout, "    n = 20\n") ||
		!strings.Contains(r.stdout, "    side\n  = 42\n") || !strings.Contains(r.stdout, "  ! ZeroDivisionError: ") {
		t.Fatalf("cells: %+v, want the three cells with their output, value and error", r)
	}
	if r := cli("", "session", "contexts", id, "new", "--language", "bash", "--context", "sh", "--cwd", "/tmp"); r.code != 0 || r.stdout != "sh\n" {
		t.Fatalf("contexts new: %+v, want sh", r)
	}
	if r := cli("", "session", "run", id, "--context", "sh", "--language", "bash", "-c", "pwd"); r.code != 0 || r.stdout != "/tmp\n" {
		t.Fatalf("a cell of sh: %+v, want it in /tmp", r)
	}
	r = cli("", "session", "contexts", id)
	if rows := strings.Split(strings.TrimSpace(r.stdout), "\n"); r.code != 0 || len(rows) != 3 ||
		!strings.HasPrefix(strings.Join(strings.Fields(rows[1]), " "), "default python 3 ") ||
		!strings.HasPrefix(strings.Join(strings.Fields(rows[2]), " "), "sh bash 1 ") || !strings.HasSuffix(rows[2], " /tmp") {
		t.Fatalf("contexts: %+v, want default (python, 3 cells) and sh (bash, 1, in /tmp)", r)
	}
	if r := cli("", "session", "contexts", id, "rm", "sh"); r.code != 0 {
		t.Fatalf("contexts rm: %+v", r)
	}
	if r := cli("", "session", "contexts", id, "rm", "sh"); r.code != 1 {
		t.Errorf("contexts rm of an ended context: %+v, want exit 1", r)
	}
	local := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(local, []byte("from the host\n"), 0o644)
	if r := cli("", "session", "cp", local, id+":data/in.txt"); r.code != 0 {
		t.Fatalf("cp in: %+v", r)
	}
	if r := cli("", "session", "exec", id, "--", "sh", "-c", "cat data/in.txt; echo out > o.txt; exit 7"); r.code != 7 || r.stdout != "from the host\n" {
		t.Fatalf("exec: %+v, want exit 7 and the file", r)
	}
	back := filepath.Join(t.TempDir(), "o.txt")
	if r := cli("", "session", "cp", id+":o.txt", back); r.code != 0 {
		t.Fatalf("cp out: %+v", r)
	}
	if b, _ := os.ReadFile(back); string(b) != "out\n" {
		t.Errorf("copied out: %q", b)
	}
	if r := cli("", "session", "ls"); r.code != 0 || !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "running") {
		t.Errorf("ls: %+v", r)
	}
	if r := cli("", "session", "rm", id); r.code != 0 {
		t.Fatalf("rm: %+v", r)
	}
	if r := cli("", "session", "exec", id, "--", "true"); r.code != 1 || !strings.Contains(r.stderr, "ended") {
		t.Errorf("exec after rm: %+v, want exit 1, ended", r)
	}
	if r := cli("", "session", "get", "nope"); r.code != 1 {
		t.Errorf("get of an unknown session: %+v", r)
	}
}
