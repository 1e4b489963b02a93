package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

func TestParseFlags(t *testing.T) {
	t.Parallel()
	bad := [][]string{
		{"--slots", "0"},
		{"--listen", "127.0.0.1:1"},          // without --embedded
		{"--embedded", "--nats", "nats://x"}, // both
		{"--bogus"},
		{"extra"},
		{"--grace", "-1s"},
		{"--max-memory", "lots"},
		{"-slots", "2"}, // GNU style: long flags take two dashes
		{"--sandbox-uids", "0-100"},
		{"--sandbox-uids", "100000"},
		{"--sandbox-uids", "100000-100003", "--slots", "2", "--pool", "2"},                                       // 4 uids, 2 + 8 sandboxes
		{"--sandbox-uids", "100000-100011", "--slots", "2", "--pool", "2", "--pool-max", "2", "--sessions", "9"}, // 12 uids, 2 + 2 + 9
		{"--sessions", "-1"},
	}
	for _, args := range bad {
		if _, err := parseFlags(args); !errors.Is(err, cmdline.ErrUsage) {
			t.Errorf("parseFlags(%q) = %v, want a usage error", args, err)
		}
	}
	o, err := parseFlags([]string{"--embedded", "--data-dir", "d", "--slots", "3", "--queue", "q", "--max-memory", "1g", "--allow-network",
		"--sandbox-uids", "300000-300099"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := executorConfig(o)
	if err != nil {
		t.Fatal(err)
	}
	if o.slots != 3 || len(o.lanes) != 1 || o.lanes[0] != (worker.Lane{Queue: "q", Weight: 1}) || cfg.Caps.Memory != 1<<30 || !cfg.Caps.Network.Open ||
		cfg.UIDs != (executor.UIDRange{First: 300000, Last: 300099}) {
		t.Errorf("options %+v, executor config %+v", o, cfg)
	}
	if _, err := parseFlags([]string{"--help"}); !errors.Is(err, cmdline.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
}

// --help and --version print on stdout and stop there; neither needs
// NATS or Docker.
func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := Run(t.Context(), t.Context(), []string{"--help"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"usage: worker", "drains", "--nats URL", "$NATS_URL", "--max-memory SIZE", "--grace D", "--version"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := Run(t.Context(), t.Context(), []string{"--version"}, &out); err != nil || out.String() != "worker dev\n" {
		t.Errorf("--version: %v, %q", err, out.String())
	}
}

// The worker's name is normalised once: the worker (results, logs,
// heartbeats) and the executor (container labels) get the same value.
func TestIDNormalisedOnce(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"--id", "gpu box#1"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := executorConfig(o)
	if err != nil {
		t.Fatal(err)
	}
	if o.id != "gpu-box-1" || cfg.WorkerID != o.id || worker.NormalizeID(o.id) != o.id {
		t.Errorf("worker %q, executor %q", o.id, cfg.WorkerID)
	}
	o, err = parseFlags(nil)
	if host, _ := os.Hostname(); err != nil || o.id != worker.NormalizeID(host) {
		t.Errorf("default id %q (%v), host %q", o.id, err, host)
	}
}

// Cap flags win over --config's caps field by field; the rest of the
// file's caps stay.
func TestCapsFlagsOverFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "caps.json")
	os.WriteFile(path, []byte(`{"caps":{"memory":"1g","cpus":1.5,"network":true}}`), 0o600)
	o, err := parseFlags([]string{"--config", path, "--max-memory", "2g", "--max-pids", "7"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := executorConfig(o)
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Caps; c.Memory != 2<<30 || c.CPUs != 1.5 || c.Pids != 7 || c.Network == nil || !c.Network.Open {
		t.Errorf("caps %+v", c)
	}
}

func TestConfigFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	os.WriteFile(good, []byte(`{"presets":{"py":{"image":"img","main_file":"m.py","argv":["python3","m.py"]}},
		"caps":{"memory":"1g"},"runtime":"runsc"}`), 0o600)
	o := &options{configFile: good}
	cfg, err := executorConfig(o)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]executor.Preset{"py": {Image: "img", MainFile: "m.py", Argv: []string{"python3", "m.py"}}}
	if !reflect.DeepEqual(cfg.Presets, want) || cfg.Caps.Memory != 1<<30 || cfg.Runtime != "runsc" {
		t.Errorf("config: %+v", cfg)
	}
	for _, body := range []string{`{"prests":{}}`, `{"presets":{"py":{"image":"img","mainfile":"m.py"}}}`} {
		bad := filepath.Join(dir, "bad.json")
		os.WriteFile(bad, []byte(body), 0o600)
		if _, err := executorConfig(&options{configFile: bad}); !errors.Is(err, cmdline.ErrUsage) {
			t.Errorf("unknown field in %s: %v", body, err)
		}
	}
}

// started is a serve running in the background.
type started struct {
	url  string
	stop context.CancelFunc
	done chan error
}

func startServe(t *testing.T, args []string, exec worker.Executor) *started {
	t.Helper()
	o, err := parseFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	o.ready = func(url string) { urls <- url }
	stop, cancel := context.WithCancel(context.Background())
	s := &started{stop: cancel, done: make(chan error, 1)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() { s.done <- serve(stop, context.Background(), o, log, exec) }()
	select {
	case s.url = <-urls:
	case err := <-s.done:
		t.Fatalf("serve: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("serve not ready within 20s")
	}
	return s
}

func (s *started) Stop(t *testing.T) {
	t.Helper()
	s.stop()
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
}

func connect(t *testing.T, url string) *jobs.Client {
	t.Helper()
	_, js := natstest.Connect(t, url)
	c, err := jobs.NewClient(t.Context(), js, jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// --embedded keeps results in --data-dir: the same job ID submitted again
// after a restart of server and worker runs once, and both callers get the
// same result.
func TestEmbeddedRestartKeepsResults(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exec := &fakeexec.Executor{}
	args := []string{"--embedded", "--listen", "127.0.0.1:-1", "--data-dir", dir, "--slots", "1", "--id", "e1"}
	job := &jobs.Job{ID: "restart-1", Image: "python", Code: "print hi"}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	s := startServe(t, args, exec)
	first, err := connect(t, s.url).SubmitAndWait(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	s.Stop(t)

	s = startServe(t, args, exec)
	defer s.Stop(t)
	second, err := connect(t, s.url).SubmitAndWait(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if first.Stdout != "hi\n" || *first.FinishedAt != *second.FinishedAt || exec.Runs("restart-1") != 1 {
		t.Errorf("first %+v second %+v runs %d", first, second, exec.Runs("restart-1"))
	}
}

// TestDockerEndToEnd runs jobs through an embedded server, the worker and
// the real executor. It needs Docker and the sandfleet/sandbox:latest image
// (workertest.Sandbox).
func TestDockerEndToEnd(t *testing.T) {
	t.Parallel()
	cfg, err := executorConfig(&options{id: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	exec := workertest.Sandbox(t, cfg)
	s := startServe(t, []string{"--embedded", "--listen", "127.0.0.1:-1", "--data-dir", t.TempDir(), "--slots", "2", "--id", "e2e"},
		&executor.Service{Executor: exec})
	defer s.Stop(t)
	c := connect(t, s.url)
	tests := []struct {
		code   string
		status jobs.Status
		exit   int
		stdout string
	}{
		{"print(6*7)", jobs.StatusSucceeded, 0, "42\n"},
		{"import sys; sys.exit(3)", jobs.StatusFailed, 3, ""},
	}
	for _, tc := range tests {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		res, err := c.SubmitAndWait(ctx, &jobs.Job{Image: "python", Code: tc.code})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != tc.status || res.ExitCode() != tc.exit || res.Stdout != tc.stdout || res.Worker != "e2e" || res.Attempt != 1 {
			t.Errorf("%q: %+v", tc.code, res)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res, err := c.SubmitAndWait(ctx, &jobs.Job{Image: "cobol", Code: "x"})
	if err != nil || res.Status != jobs.StatusRejected || !strings.Contains(res.Error, "cobol") {
		t.Errorf("unknown preset: %v %+v", err, res)
	}
}

// The fleet-wide retention flags reach the streams they set: EVENTS keeps
// a job's events --events-max-age, WORKSPACES its heads --workspace-ttl.
func TestRetentionFlags(t *testing.T) {
	t.Parallel()
	// No HTTP API: its client may make a bucket beside the worker, the
	// race docs/jobs.md's "Limits and caps" leaves (see TestOpenLeavesTheWorkersSettings).
	args := []string{"--embedded", "--listen", "127.0.0.1:-1", "--data-dir", t.TempDir(), "--slots", "1", "--id", "ret1", "--http", "",
		"--events-max-age", "10m", "--workspace-ttl", "2h"}
	s := startServe(t, args, &fakeexec.Executor{})
	defer s.Stop(t)
	_, js := natstest.Connect(t, s.url)
	for stream, want := range map[string]time.Duration{fleet.EventsStreamName: 10 * time.Minute, "KV_" + fleet.WorkspacesBucket: 2 * time.Hour} {
		// Whoever makes the stream first (the embedded gateway's client
		// may), the worker's settings are what it keeps.
		err := testutil.Poll(t.Context(), 10*time.Second, 50*time.Millisecond, func(ctx context.Context) error {
			st, err := js.Stream(ctx, stream)
			if err != nil {
				return err
			}
			if got := st.CachedInfo().Config.MaxAge; got != want {
				return fmt.Errorf("%s keeps %s, want %s", stream, got, want)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}
}

// The storage caps reach the streams they bound, and the quotas the
// object stores; a size that is none is a usage error.
func TestStorageCapFlags(t *testing.T) {
	t.Parallel()
	args := []string{"--embedded", "--listen", "127.0.0.1:-1", "--data-dir", t.TempDir(), "--slots", "1", "--id", "caps1", "--http", "",
		"--results-max-bytes", "16m", "--cancels-max-keys", "500", "--workspaces-max-keys", "300",
		"--workspace-quota", "8m", "--artifact-quota", "4m"}
	s := startServe(t, args, &fakeexec.Executor{})
	defer s.Stop(t)
	_, js := natstest.Connect(t, s.url)
	for stream, want := range map[string][2]int64{
		"KV_" + fleet.ResultsBucket:    {16 << 20, -1},
		"KV_" + fleet.CancelsBucket:    {64 << 20, 500},
		"KV_" + fleet.WorkspacesBucket: {256 << 20, 300},
		"OBJ_" + fleet.SnapshotsBucket: {8 << 20, -1},
		"OBJ_" + fleet.ArtifactsBucket: {4 << 20, -1},
	} {
		err := testutil.Poll(t.Context(), 60*time.Second, 50*time.Millisecond, func(ctx context.Context) error {
			st, err := js.Stream(ctx, stream)
			if err != nil {
				return err
			}
			if c := st.CachedInfo().Config; c.MaxBytes != want[0] || c.MaxMsgs != want[1] {
				return fmt.Errorf("%s: max bytes %d, msgs %d; want %d %d", stream, c.MaxBytes, c.MaxMsgs, want[0], want[1])
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}
	if _, err := parseFlags([]string{"--workspace-quota", "lots"}); !errors.Is(err, cmdline.ErrUsage) {
		t.Errorf("--workspace-quota lots: %v", err)
	}
}

// --egress-allow is the rules any job may name; a bad one is a usage
// error naming the flag.
func TestEgressAllowFlag(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"--egress-allow", "pypi.org, *.pythonhosted.org,10.1.0.0/16:443"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := executorConfig(o)
	if err != nil {
		t.Fatal(err)
	}
	if n := cfg.Caps.Network; n == nil || n.Open || len(n.Allow) != 3 || n.Allow[2].String() != "10.1.0.0/16:443" {
		t.Errorf("caps.network %v", n)
	}
	o, _ = parseFlags(nil)
	if cfg, _ := executorConfig(o); cfg.Caps.Network != nil {
		t.Errorf("no flag: caps.network %v, want none", cfg.Caps.Network)
	}
	o, _ = parseFlags([]string{"--egress-allow", "a..b"})
	if _, err := executorConfig(o); !errors.Is(err, cmdline.ErrUsage) || !strings.Contains(err.Error(), "--egress-allow") {
		t.Errorf("bad --egress-allow: %v", err)
	}
}

// --secrets reads the operator's credentials: the caps learn each name
// and its hosts, and a bad entry is a usage error that names it and never
// shows a value.
func TestSecretsFlag(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "gh"), []byte("ghp_value_from_file\n"), 0o600)
	t.Setenv("SANDFLEET_TEST_SECRET", "value_from_env")
	good := filepath.Join(dir, "good.json")
	os.WriteFile(good, []byte(`[{"name": "gh", "hosts": ["api.github.com"], "header": "authorization", "value_file": "`+filepath.Join(dir, "gh")+`"},
		{"name": "pypi", "hosts": ["pypi.org"], "header": "X-Token", "value_env": "SANDFLEET_TEST_SECRET"}]`), 0o600)
	o, err := parseFlags([]string{"--egress-allow", "api.github.com,pypi.org", "--secrets", good})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.secrets) != 2 || o.secrets[0].Header != "Authorization" || o.secrets[0].Value != "ghp_value_from_file" || o.secrets[1].Value != "value_from_env" {
		t.Errorf("secrets %+v", o.secrets)
	}
	if s := fmt.Sprintf("%v %+v", o.secrets, o.secrets); strings.Contains(s, "value_from") {
		t.Errorf("a secret formats with its value: %s", s)
	}
	cfg, err := executorConfig(o)
	if err != nil {
		t.Fatal(err)
	}
	if h := cfg.Caps.Network.SecretHosts; len(h) != 2 || h["gh"][0] != "api.github.com" {
		t.Errorf("caps' secrets %v", h)
	}
	if _, err := executorConfig(&options{secrets: o.secrets}); !errors.Is(err, cmdline.ErrUsage) {
		t.Errorf("secrets where no job has a network: %v", err)
	}
	for name, body := range map[string]string{
		"unset env":  `[{"name": "a", "hosts": ["a.b"], "header": "X", "value_env": "SANDFLEET_TEST_UNSET"}]`,
		"no hosts":   `[{"name": "a", "hosts": [], "header": "X", "value_env": "SANDFLEET_TEST_SECRET"}]`,
		"bad header": `[{"name": "a", "hosts": ["a.b"], "header": "Host", "value_env": "SANDFLEET_TEST_SECRET"}]`,
		"twice":      `[{"name": "a", "hosts": ["a.b"], "header": "X", "value_env": "SANDFLEET_TEST_SECRET"}, {"name": "a", "hosts": ["a.b"], "header": "X", "value_env": "SANDFLEET_TEST_SECRET"}]`,
		"unknown":    `[{"name": "a", "hosts": ["a.b"], "header": "X", "value": "inline"}]`,
	} {
		f := filepath.Join(dir, "bad.json")
		os.WriteFile(f, []byte(body), 0o600)
		_, err := parseFlags([]string{"--secrets", f})
		if !errors.Is(err, cmdline.ErrUsage) || !strings.Contains(err.Error(), "--secrets") || strings.Contains(err.Error(), "value_from_env") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
