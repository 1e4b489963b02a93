package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/worker"
)

// setup starts an in-process JetStream server and, unless noWorker, a
// worker on the fake executor. It returns the server's URL.
func setup(t *testing.T, noWorker bool) string {
	t.Helper()
	srv := natstest.Server(t)
	if noWorker {
		return srv.ClientURL()
	}
	_, js := natstest.Connect(t, srv.ClientURL())
	workertest.Start(t, js, &fakeexec.Executor{}, worker.Config{ID: "test", Slots: 2})
	return srv.ClientURL()
}

type out struct {
	code           int
	stdout, stderr string
}

func submit(t *testing.T, url, stdin string, args ...string) out {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var o, e bytes.Buffer
	args = append(args, "--nats", url) // also proves flags after arguments work
	code := Run(ctx, args, strings.NewReader(stdin), &o, &e)
	return out{code, o.String(), e.String()}
}

func TestRunExitCodes(t *testing.T) {
	t.Parallel()
	url := setup(t, false)
	dir := t.TempDir()
	script := filepath.Join(dir, "job.sh")
	os.WriteFile(script, []byte("print from a file\neprint to stderr"), 0o600)
	tests := []struct {
		name   string
		stdin  string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"succeeded", "", []string{"run", "-c", "print 42"}, 0, "42\n", ""},
		{"failed exits as the job", "", []string{"run", "-c", "exit 3"}, 3, "", ""},
		{"timeout", "", []string{"run", "-c", "timeout", "--timeout", "1s"}, 124, "", "timeout"},
		{"rejected by the worker", "", []string{"run", "-c", "x", "--image", "cobol"}, 2, "", "unknown preset"},
		{"over the cap", "", []string{"run", "--memory", "64g", "-c", "x"}, 2, "", "limits.memory"},
		{"file, flags after it", "", []string{"run", script, "--env", "K=V"}, 0, "from a file\n", "to stderr\n"},
		{"code from stdin", "print piped", []string{"run", "-"}, 0, "piped\n", ""},
		{"no code", "", []string{"run"}, 2, "", "no code"},
		{"code and file", "", []string{"run", "-c", "x", script}, 2, "", "not both"},
		{"bad flag", "", []string{"run", "--bogus"}, 2, "", "bogus"},
		{"bad memory", "", []string{"run", "-c", "x", "--memory", "lots"}, 2, "", "invalid size"},
		{"bad id", "", []string{"run", "-c", "x", "--id", "a b"}, 2, "", "must match"},
		{"unknown command", "", []string{"frobnicate"}, 2, "", "unknown command"},
		{"get unknown", "", []string{"get", "no-such-job"}, 1, "", "no job no-such-job"},
		{"wait unknown", "", []string{"wait", "no-such-job"}, 1, "", "no job no-such-job"},
		{"cancel unknown", "", []string{"cancel", "no-such-job"}, 1, "", "no job no-such-job"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := submit(t, url, tc.stdin, tc.args...)
			if got.code != tc.code || got.stdout != tc.stdout || !strings.Contains(got.stderr, tc.stderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q, stderr containing %q",
					got.code, got.stdout, got.stderr, tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}

func TestRunJSONDetachWaitGet(t *testing.T) {
	t.Parallel()
	url := setup(t, false)
	got := submit(t, url, "", "run", "--json", "-c", "print 6*7", "--label", "k=v", "--id", "json-1")
	var res jobs.Result
	if err := json.Unmarshal([]byte(got.stdout), &res); err != nil || got.code != 0 {
		t.Fatalf("--json: exit %d, %q: %v", got.code, got.stdout, err)
	}
	if res.ID != "json-1" || res.Status != jobs.StatusSucceeded || res.Stdout != "6*7\n" || res.Labels["k"] != "v" || res.Worker != "test" {
		t.Errorf("result: %+v", res)
	}

	got = submit(t, url, "", "run", "--detach", "-c", "sleep 200ms\nexit 3")
	id := strings.TrimSpace(got.stdout)
	if got.code != 0 || !jobs.ValidID(id) {
		t.Fatalf("--detach: exit %d, %q", got.code, got.stdout)
	}
	if got = submit(t, url, "", "wait", id); got.code != 3 {
		t.Errorf("wait: exit %d, want 3 (%s)", got.code, got.stderr)
	}
	got = submit(t, url, "", "get", id, "--json")
	if err := json.Unmarshal([]byte(got.stdout), &res); err != nil || got.code != 3 || res.ID != id {
		t.Errorf("get --json: exit %d, %q", got.code, got.stdout)
	}
}

func TestGetPendingAndCancel(t *testing.T) {
	t.Parallel()
	url := setup(t, true) // no worker: jobs stay queued
	got := submit(t, url, "", "run", "--detach", "--id", "queued-1", "-c", "print never")
	if got.code != 0 {
		t.Fatalf("detach: %+v", got)
	}
	if got = submit(t, url, "", "get", "queued-1"); got.code != 75 || !strings.Contains(got.stderr, "queued or running") {
		t.Errorf("get of a queued job: %+v", got)
	}
	if got = submit(t, url, "", "cancel", "queued-1"); got.code != 0 {
		t.Errorf("cancel: %+v", got)
	}
	if got = submit(t, url, "", "wait", "queued-1"); got.code != 130 {
		t.Errorf("wait of a canceled job: exit %d, want 130 (%s)", got.code, got.stderr)
	}
	if got = submit(t, url, "", "cancel", "queued-1"); got.code != 1 || !strings.Contains(got.stderr, "already finished") {
		t.Errorf("second cancel: %+v", got)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"run", "get", "wait", "cancel"} {
		var o, e bytes.Buffer
		code := Run(t.Context(), []string{cmd, "--help"}, strings.NewReader(""), &o, &e)
		if code != 0 || !strings.Contains(o.String(), "--nats URL") || !strings.Contains(o.String(), "--json") {
			t.Errorf("%s --help: exit %d, stdout %q", cmd, code, o.String())
		}
	}
	var o, e bytes.Buffer
	if code := Run(t.Context(), []string{"run", "--help"}, strings.NewReader(""), &o, &e); code != 0 || !strings.Contains(o.String(), "--detach") {
		t.Errorf("run --help: %d %q", code, o.String())
	}
}

func TestUnreachableNATS(t *testing.T) {
	t.Parallel()
	got := submit(t, "nats://127.0.0.1:1", "", "run", "-c", "x")
	if got.code != 125 || !strings.Contains(got.stderr, "cannot reach NATS") {
		t.Errorf("%+v", got)
	}
}
