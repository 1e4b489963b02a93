package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
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

// runCLI runs submit's command line as main does, on the given streams,
// none of them a terminal.
func runCLI(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	m := &Main{Stdin: stdin, Stdout: stdout, Stderr: stderr, IsTerminal: func(io.Writer) bool { return false }}
	return exitCode(m.Run(ctx, args), stderr)
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
	code := runCLI(ctx, args, strings.NewReader(stdin), &o, &e)
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

// Every command's --help (and "submit help CMD") explains the command,
// lists its flags and the global ones, on stdout, exit 0.
func TestHelp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"usage: submit [--nats URL] [--credentials FILE] <command>", "Commands:", "batch FILE.jsonl", "--nats URL", "$NATS_URL", "Exit codes"}},
		{[]string{"help"}, []string{"Commands:"}},
		{[]string{"-h"}, []string{"Commands:"}},
		{[]string{"run", "--help"}, []string{"Runs one job", "-c, --code CODE", "--memory SIZE", "--detach", "--raw", "--json", "Global flags:", "--nats URL"}},
		{[]string{"help", "run"}, []string{"Runs one job", "--detach"}},
		{[]string{"--nats", "nats://x:1", "run", "-h"}, []string{"Runs one job"}},
		{[]string{"get", "--help"}, []string{"usage: submit get ID", "stored result", "Exits 75", "--json", "--raw", "--nats URL"}},
		{[]string{"wait", "--help"}, []string{"Waits for the result", "--json", "--raw", "--nats URL"}},
		{[]string{"cancel", "--help"}, []string{"Cancels job ID", "--json", "--nats URL"}},
		{[]string{"status", "--help"}, []string{"live workers", "--json", "--nats URL"}},
		{[]string{"batch", "--help"}, []string{"Runs every line", "-o, --out OUT.jsonl", "--window N", "--strict", "--nats URL"}},
	}
	for _, tc := range tests {
		var o, e bytes.Buffer
		code := runCLI(t.Context(), tc.args, strings.NewReader(""), &o, &e)
		if code != 0 || e.Len() != 0 {
			t.Errorf("%q: exit %d, stderr %q", tc.args, code, e.String())
		}
		for _, want := range tc.want {
			if !strings.Contains(o.String(), want) {
				t.Errorf("%q: help lacks %q:\n%s", tc.args, want, o.String())
			}
		}
	}
}

// Usage errors exit 2, say what is wrong and where help is.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{nil, "Commands:"},
		{[]string{"frobnicate"}, "unknown command \"frobnicate\"\nrun \"submit --help\""},
		{[]string{"--nats"}, "flag needs an argument: --nats"},
		{[]string{"--bogus", "run"}, "unknown flag: --bogus"},
		{[]string{"run", "-json", "-c", "x"}, "long flags take two dashes: --json)\nrun \"submit run --help\" for the flags"},
		{[]string{"get"}, "get takes one job ID"},
		{[]string{"status", "extra"}, "status takes no arguments"},
		{[]string{"batch"}, "batch takes one FILE.jsonl"},
		{[]string{"help", "frobnicate"}, "help takes one command"},
		{[]string{"run", "--timeout", "soon", "-c", "x"}, "invalid argument \"soon\" for \"--timeout\""},
		{[]string{"run", "--env", "novalue", "-c", "x"}, "want K=V"},
	}
	for _, tc := range tests {
		var o, e bytes.Buffer
		code := runCLI(t.Context(), tc.args, strings.NewReader(""), &o, &e)
		if code != 2 || !strings.Contains(e.String(), tc.want) || o.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, o.String(), e.String(), tc.want)
		}
	}
}

// Global flags go before or after the command, as in docker, git and
// nats; given twice, the last one wins.
func TestGlobalFlagsAnywhere(t *testing.T) {
	t.Parallel()
	url := setup(t, false)
	for _, args := range [][]string{
		{"--nats", url, "run", "-c", "print 1"},
		{"--nats=" + url, "run", "-c", "print 1"},
		{"run", "--nats", url, "-c", "print 1"},
		{"run", "-c", "print 1", "--nats=" + url},
		{"--nats", "nats://127.0.0.1:1", "run", "-c", "print 1", "--nats", url},
	} {
		var o, e bytes.Buffer
		if code := runCLI(t.Context(), args, strings.NewReader(""), &o, &e); code != 0 || o.String() != "1\n" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, o.String(), e.String())
		}
	}
}

func TestUnreachableNATS(t *testing.T) {
	t.Parallel()
	got := submit(t, "nats://127.0.0.1:1", "", "run", "-c", "x")
	if got.code != 125 || !strings.Contains(got.stderr, "cannot reach NATS") {
		t.Errorf("%+v", got)
	}
}

// --network asks for open egress, --egress for named rules; a bad rule is
// a usage error naming the flag.
func TestRunEgressFlags(t *testing.T) {
	t.Parallel()
	build := func(args ...string) (*jobs.Job, error) {
		c := &runCommand{}
		fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
		c.define(fs)
		if err := fs.Parse(append(args, "-c", "print(1)")); err != nil {
			t.Fatal(err)
		}
		return c.job(fs)
	}
	j, err := build("--egress", "pypi.org", "--egress", "*.pythonhosted.org:443")
	if err != nil {
		t.Fatal(err)
	}
	if n := j.Limits.Network; n == nil || n.Open || len(n.Allow) != 2 || n.Allow[1].String() != "*.pythonhosted.org:443" {
		t.Errorf("--egress: network %v", n)
	}
	if j, _ := build("--network"); j.Limits.Network == nil || !j.Limits.Network.Open {
		t.Errorf("--network: network %v", j.Limits.Network)
	}
	if j, _ := build(); j.Limits.Network != nil {
		t.Errorf("no flag: network %v", j.Limits.Network)
	}
	if _, err := build("--egress", "a..b"); err == nil || !strings.Contains(err.Error(), "--egress") {
		t.Errorf("a bad rule: %v", err)
	}
}

// session network's POLICY: none, a JSON limits.network, or rules.
func TestParsePolicy(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"none":              "none",
		`"none"`:            "none",
		"false":             "none",
		"a.org,*.b.org:443": `{"allow":["a.org","*.b.org:443"]}`,
		`{"allow": ["a.org"], "secrets": ["gh"]}`: `{"allow":["a.org"],"secrets":["gh"]}`,
		"a..b":                         "",
		`{"allow": ["a.org"], "x": 1}`: "",
	} {
		n, err := parsePolicy(in)
		switch {
		case want == "" && err == nil:
			t.Errorf("%q: %v, want an error", in, n)
		case want != "" && (err != nil || n.String() != want):
			t.Errorf("%q: %v %v, want %s", in, n, err, want)
		}
	}
}
