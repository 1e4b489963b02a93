package main

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/internal/natsconn"
	"github.com/sandfleet/sandfleet/internal/natscreds"
	"github.com/sandfleet/sandfleet/internal/natsembed"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// embeddedWorker starts the binary as make run does (--embedded, its
// HTTP API on), on the fake executor, with its server on listen and its
// store in dir.
func embeddedWorker(t *testing.T, listen, dir, execLog string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"--embedded", "--listen", listen, "--data-dir", dir, "--http", testutil.FreeAddr(t),
		"--id", "embedded", "--log-format", "json"}, extra...)
	return startProc(t, "embedded", args, hookFakeExecutor+"=1", hookFakeExecutorLog+"="+execLog)
}

// A force stop of worker --embedded (two SIGTERMs) during a job hands the
// job back, and the embedded server, stopped with the worker, keeps the
// hand-back: once the worker is started again on the same --data-dir the
// job runs at once, not when its lease (10 minutes here) runs out.
func TestEmbeddedForceStopHandBackSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	listen := testutil.FreeAddr(t)
	execLog := filepath.Join(t.TempDir(), "exec.log")
	release := filepath.Join(t.TempDir(), "release")
	metrics := testutil.FreeAddr(t)
	lease := []string{"--ack-wait", "10m"}

	w := embeddedWorker(t, listen, dir, execLog, append(lease, "--metrics", metrics)...)
	client := connectEmbedded(t, listen, dir)
	if _, err := client.Submit(t.Context(), &jobs.Job{ID: "handed-back", Image: "python", Code: "waitfile " + release + "\nprint done"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the job running", func() bool { r, _ := executions(t, execLog); return r["handed-back"] == 1 })
	w.signal(t, syscall.SIGTERM)
	testutil.Eventually(t, 10*time.Second, "draining", func() bool { st, ok := status(t, metrics); return ok && st.Draining })
	w.signal(t, syscall.SIGTERM)
	if code := w.exited(t, 20*time.Second); code != 0 {
		t.Fatalf("forced worker exited %d, want 0", code)
	}
	if n := handBacks(t, w.logs.String())["handed-back"]; n != 1 {
		t.Fatalf("the forced worker handed the job back %d times, want once", n)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	restarted := time.Now()
	w = embeddedWorker(t, listen, dir, execLog, lease...)
	client = connectEmbedded(t, listen, dir)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := client.Wait(ctx, "handed-back")
	if err != nil {
		t.Fatalf("no result 30s after the restart (the lease is 10m): %v", err)
	}
	t.Logf("the handed-back job finished %s after the restart", time.Since(restarted).Round(time.Millisecond))
	if res.Status != jobs.StatusSucceeded || res.Attempt != 2 || res.Stdout != "done\n" {
		t.Errorf("result %+v, want succeeded as attempt 2", res)
	}
	if r, _ := executions(t, execLog); r["handed-back"] != 2 {
		t.Errorf("%d runs, want 2", r["handed-back"])
	}
	w.signal(t, syscall.SIGTERM)
	if code := w.exited(t, 20*time.Second); code != 0 {
		t.Errorf("worker exited %d", code)
	}
}

// connectEmbedded connects to the embedded server of a worker process on
// listen, with the credentials in its data directory dir, once it
// accepts connections and the topology is there.
func connectEmbedded(t *testing.T, listen, dir string) *jobs.Client {
	t.Helper()
	var c *jobs.Client
	err := testutil.Poll(t.Context(), 20*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		user, password, err := natscreds.Read(filepath.Join(dir, natscreds.File))
		if err != nil {
			return err // not written yet
		}
		nc, js, err := natsconn.JetStream(natsconn.Config{URL: "nats://" + listen, Name: "test", Extra: []nats.Option{nats.UserInfo(user, password)}})
		if err != nil {
			return err
		}
		c, err = jobs.NewClient(ctx, js, jobs.Config{})
		if err != nil {
			nc.Close()
			return err
		}
		t.Cleanup(nc.Close)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// worker --embedded makes its server's credentials at the first start in
// --data-dir (mode 0600), connects with them and keeps them across
// restarts. The server refuses a connection without them, or with
// another password, before anything is read or written: a local process
// can no longer rewrite a stored result or publish into JOBS around the
// HTTP API's tokens.
func TestEmbeddedServerRequiresCredentials(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := []string{"--embedded", "--listen", "127.0.0.1:-1", "--data-dir", dir, "--http", "", "--slots", "1", "--id", "creds"}
	s := startServe(t, args, &fakeexec.Executor{})
	path := filepath.Join(dir, natscreds.File)
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v, want mode 0600", path, st, err)
	}
	user, password, err := natscreds.Read(path)
	if err != nil || user != natsembed.User || len(password) < 32 {
		t.Fatalf("credentials %q, %d bytes of password, %v", user, len(password), err)
	}
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	bare := "nats://" + u.Host
	for name, opts := range map[string][]nats.Option{
		"no credentials":   nil,
		"another password": {nats.UserInfo(user, password+"x")},
	} {
		nc, err := nats.Connect(bare, opts...)
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("%s: %v, want the server's authorization violation", name, err)
		}
		if nc != nil {
			nc.Close()
		}
	}

	_, js := natstest.Connect(t, bare, nats.UserInfo(user, password))
	c, err := jobs.NewClient(t.Context(), js, jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if res, err := c.SubmitAndWait(ctx, &jobs.Job{ID: "with-creds", Image: "python", Code: "print ok"}); err != nil || res.Stdout != "ok\n" {
		t.Errorf("with the credentials: %v %+v", err, res)
	}
	s.Stop(t)

	s = startServe(t, args, &fakeexec.Executor{})
	defer s.Stop(t)
	if _, again, err := natscreds.Read(path); err != nil || again != password {
		t.Errorf("restart: %v; the password changed: %v", err, again != password)
	}
	if su, err := url.Parse(s.url); err != nil || su.User.String() != url.UserPassword(user, password).String() {
		t.Errorf("the worker connects to %s, not with the stored credentials", s.url)
	}
}

// --no-credentials opens the embedded server on loopback only, and writes
// no credentials; a non-loopback --listen without credentials is refused.
func TestEmbeddedNoCredentials(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--embedded", "--no-credentials", "--listen", "0.0.0.0:4222"},
		{"--embedded", "--no-credentials", "--listen", ":4222"},
		{"--embedded", "--no-credentials", "--listen", "[::]:4222"},
		{"--embedded", "--no-credentials", "--listen", "192.0.2.1:4222"},
		{"--no-credentials"}, // without --embedded
	} {
		if _, err := parseFlags(args); !errors.Is(err, cmdline.ErrUsage) {
			t.Errorf("parseFlags(%q) = %v, want a usage error", args, err)
		}
	}
	for _, args := range [][]string{
		{"--embedded", "--no-credentials"},
		{"--embedded", "--no-credentials", "--listen", "localhost:4222"},
		{"--embedded", "--listen", "0.0.0.0:4222"}, // with credentials
	} {
		if _, err := parseFlags(args); err != nil {
			t.Errorf("parseFlags(%q) = %v", args, err)
		}
	}

	dir := t.TempDir()
	s := startServe(t, []string{"--embedded", "--no-credentials", "--listen", "127.0.0.1:-1", "--data-dir", dir, "--http", "", "--id", "open"}, &fakeexec.Executor{})
	defer s.Stop(t)
	nc, err := nats.Connect(s.url)
	if err != nil {
		t.Fatalf("--no-credentials: %v", err)
	}
	nc.Close()
	if _, err := os.Stat(filepath.Join(dir, natscreds.File)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("--no-credentials wrote credentials: %v", err)
	}
}

// A credentials file that others may read is refused at start, with the
// fix in the message.
func TestEmbeddedRefusesReadableCredentials(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, natscreds.File)
	if err := os.WriteFile(path, []byte("sandfleet:chosen\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil { // past the umask
		t.Fatal(err)
	}
	o, err := parseFlags([]string{"--embedded", "--listen", "127.0.0.1:-1", "--data-dir", dir, "--http", ""})
	if err != nil {
		t.Fatal(err)
	}
	// A worker that starts anyway stops after a while, and fails the test.
	stop, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err = serve(stop, stop, o, slog.New(slog.NewTextHandler(io.Discard, nil)), &fakeexec.Executor{})
	if !errors.Is(err, natsembed.ErrCredentialsMode) || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("serve: %v, want a refusal naming chmod 600", err)
	}
}

// submitBinary builds cmd/submit, once per test run.
func submitBinary(t *testing.T) string {
	t.Helper()
	workerBinary(t) // makes binDir
	binMu.Lock()
	defer binMu.Unlock()
	if path, ok := binByTags["submit"]; ok {
		return path
	}
	path := filepath.Join(binDir, "submit")
	cmd := exec.Command("go", "build", "-o", path, "../submit")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ../submit: %v\n%s", err, out)
	}
	binByTags["submit"] = path
	return path
}

// runSubmit runs the submit binary in dir with args, $NATS_URL and
// $SANDFLEET_NATS_CREDENTIALS unset, and returns its output and exit code.
func runSubmit(t *testing.T, dir string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, submitBinary(t), args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, natsconn.EnvURL+"=") && !strings.HasPrefix(kv, "SANDFLEET_NATS_CREDENTIALS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("submit %q: %v", args, err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// make run, then submit beside it: `bin/worker --embedded` with every
// default (127.0.0.1:4222, ./data) and `bin/submit run` with no flag, both
// in one directory, as README's set-up shows. submit finds the server's
// credentials in ./data. From another directory it is refused with a
// message that says what to pass, and --credentials FILE is that.
func TestSubmitBesideEmbeddedWorker(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:4222")
	if err != nil {
		t.Skipf("the default address of worker --embedded is taken (another make run?): %v", err)
	}
	ln.Close()
	repo, elsewhere := t.TempDir(), t.TempDir()
	execLog := filepath.Join(t.TempDir(), "exec.log")
	w := startBinaryIn(t, repo, workerBinary(t), "make-run", []string{"--embedded", "--http", "", "--log-format", "json"},
		hookFakeExecutor+"=1", hookFakeExecutorLog+"="+execLog)
	creds := filepath.Join(repo, "data", natscreds.File)
	testutil.Eventually(t, 20*time.Second, "the worker ready", func() bool {
		return strings.Contains(w.logs.String(), `"msg":"worker started"`)
	})

	out, code := runSubmit(t, repo, "run", "-c", "print beside")
	if code != 0 || out != "beside\n" {
		t.Errorf("submit run beside the worker: exit %d, %q; want 0, \"beside\\n\"", code, out)
	}
	out, code = runSubmit(t, elsewhere, "run", "-c", "print elsewhere")
	if code != 125 || !strings.Contains(out, "Authorization Violation") || !strings.Contains(out, "--credentials FILE") {
		t.Errorf("submit run elsewhere: exit %d, %q; want 125 and what to pass", code, out)
	}
	out, code = runSubmit(t, elsewhere, "--credentials", creds, "run", "-c", "print elsewhere")
	if code != 0 || out != "elsewhere\n" {
		t.Errorf("submit --credentials FILE run: exit %d, %q", code, out)
	}
	if _, total := executions(t, execLog); total != 2 {
		t.Errorf("%d jobs ran, want the 2 that had the credentials", total)
	}
	w.signal(t, syscall.SIGTERM)
	if code := w.exited(t, 20*time.Second); code != 0 {
		t.Errorf("worker exited %d", code)
	}
}
