package executor

// Integration tests against the real Docker engine and the real sandbox
// image. They skip when either is absent, unless SANDFLEET_REQUIRE_DOCKER=1
// (CI), where absence is a failure. -short skips them all.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

var (
	dockerOnce sync.Once
	dockerCli  *client.Client
	dockerErr  error
)

// sharedClient returns one Docker client for all tests, or the reason there
// is none.
func sharedClient() (*client.Client, error) {
	dockerOnce.Do(func() {
		cli, err := client.New(client.FromEnv)
		if err != nil {
			dockerErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
			dockerErr = fmt.Errorf("docker daemon unreachable: %w", err)
			return
		}
		if _, err := cli.ImageInspect(ctx, DefaultImage); err != nil {
			dockerErr = fmt.Errorf("image %s missing (run sandbox-image/build.sh): %w", DefaultImage, err)
			return
		}
		dockerCli = cli
	})
	return dockerCli, dockerErr
}

// requireDocker returns the shared client, or skips t (fails it under
// SANDFLEET_REQUIRE_DOCKER=1) when Docker or the image is missing.
func requireDocker(t testing.TB) *client.Client {
	t.Helper()
	var cli *client.Client
	testutil.NeedDocker(t, func(context.Context) (err error) {
		cli, err = sharedClient()
		return err
	})
	return cli
}

var nonName = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// setup returns an Executor with a worker ID of its own, on the image
// SANDFLEET_TEST_IMAGE names when set, and checks at the end of the test
// that it left no container behind.
func setup(t testing.TB, mod func(*Config)) *Executor {
	t.Helper()
	cli := requireDocker(t)
	cfg := Config{
		Client:   cli,
		WorkerID: "test-" + nonName.ReplaceAllString(t.Name(), "_") + "-" + randHex(3),
	}
	// A branch's own image (SANDBOX_IMAGE=TAG sandbox-image/build.sh), so
	// that a launcher change is tested without retagging the shared one.
	if img := os.Getenv("SANDFLEET_TEST_IMAGE"); img != "" {
		cfg.Presets = DefaultPresets()
		for n, p := range cfg.Presets {
			p.Image = img
			cfg.Presets[n] = p
		}
	}
	if mod != nil {
		mod(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil { // removes a warm pool
			t.Errorf("Close: %v", err)
		}
		assertNoLeftovers(t, cli, e.cfg.WorkerID)
	})
	return e
}

func listOf(t testing.TB, cli *client.Client, worker string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", LabelWorker+"="+worker),
	})
	if err != nil {
		t.Fatalf("listing containers: %v", err)
	}
	var ids []string
	for _, c := range list.Items {
		ids = append(ids, shortID(c.ID)+" "+string(c.State))
	}
	return ids
}

func assertNoLeftovers(t testing.TB, cli *client.Client, worker string) {
	t.Helper()
	if left := listOf(t, cli, worker); len(left) > 0 {
		t.Errorf("containers left behind by worker %s: %v", worker, left)
	}
}

func job(code string, mod ...func(*jobs.Job)) *jobs.Job {
	j := &jobs.Job{ID: "t-" + randHex(6), Image: "python", Code: code}
	for _, m := range mod {
		m(j)
	}
	return j
}

func withLimits(l limits.Limits) func(*jobs.Job) { return func(j *jobs.Job) { j.Limits = l } }

func run(t testing.TB, e *Executor, j *jobs.Job) *jobs.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := e.Run(ctx, j, jobrun.Options{})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

func want(t testing.TB, res *jobs.Result, status jobs.Status) {
	t.Helper()
	if res.Status != status {
		t.Fatalf("status = %s, want %s; exit=%v error=%q\nstdout=%.2000q\nstderr=%.2000q",
			res.Status, status, derefInt(res.Exit), res.Error, res.Stdout, res.Stderr)
	}
}

func wantExit(t testing.TB, res *jobs.Result, code int) {
	t.Helper()
	if res.Exit == nil || *res.Exit != code {
		t.Fatalf("exit = %v, want %d (stderr %q)", derefInt(res.Exit), code, res.Stderr)
	}
}

func TestIntegrationSucceeded(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	res := run(t, e, job("print(6*7)"))
	want(t, res, jobs.StatusSucceeded)
	wantExit(t, res, 0)
	if res.Stdout != "42\n" || res.Stderr != "" {
		t.Fatalf("stdout %q stderr %q, want \"42\\n\" and nothing", res.Stdout, res.Stderr)
	}
	if res.DurationMS == nil || res.StartedAt == nil || res.FinishedAt == nil {
		t.Fatalf("timing missing: %+v", res)
	}
	// The launcher always reports wait4 figures for a job that ended on its own.
	if res.CPUMS == nil || res.PeakMemoryBytes == nil || *res.PeakMemoryBytes < 1<<20 {
		t.Fatalf("usage figures missing or implausible: cpu_ms=%v peak=%v", res.CPUMS, res.PeakMemoryBytes)
	}
	t.Logf("duration %d ms, cpu %d ms, peak %d bytes", *res.DurationMS, *res.CPUMS, *res.PeakMemoryBytes)
}

func TestIntegrationExitCodesAndStreams(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	cases := []struct {
		name, image, code string
		argv              []string
		status            jobs.Status
		exit              int
		stdout, stderr    string
		errContains       string
	}{
		{name: "exit 3", image: "python", code: "import sys\nsys.exit(3)", status: jobs.StatusFailed, exit: 3},
		{name: "streams apart", image: "python", code: "import sys\nprint('out')\nprint('err', file=sys.stderr)",
			status: jobs.StatusSucceeded, stdout: "out\n", stderr: "err\n"},
		{name: "shell preset", image: "shell", code: "echo \"$HOME\"; echo oops >&2; exit 5",
			status: jobs.StatusFailed, exit: 5, stdout: "/workspace\n", stderr: "oops\n"},
		{name: "killed by signal", image: "python", code: "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)",
			status: jobs.StatusFailed, exit: 128 + 15, errContains: "signal 15"},
		{name: "command not found", image: "shell", argv: []string{"no-such-command"},
			status: jobs.StatusFailed, exit: 127, errContains: "not found"},
		{name: "background child outlives main", image: "shell", code: "sleep 300 &\necho bye",
			status: jobs.StatusSucceeded, stdout: "bye\n"},
		{name: "env and argv override", image: "shell", argv: []string{"sh", "-c", "echo \"$GREETING\" \"$0\"", "arg0"},
			code: "exit 9", status: jobs.StatusSucceeded, stdout: "hi arg0\n"},
		{name: "stderr without newline then trailer", image: "shell", code: "printf 'no newline' >&2",
			status: jobs.StatusSucceeded, stderr: "no newline"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, e, job(tc.code, func(j *jobs.Job) {
				j.Image, j.Argv, j.Env = tc.image, tc.argv, map[string]string{"GREETING": "hi"}
			}))
			want(t, res, tc.status)
			wantExit(t, res, tc.exit)
			if tc.stdout != "" && res.Stdout != tc.stdout {
				t.Errorf("stdout = %q, want %q", res.Stdout, tc.stdout)
			}
			if tc.stderr != "" && res.Stderr != tc.stderr {
				t.Errorf("stderr = %q, want %q", res.Stderr, tc.stderr)
			}
			if !strings.Contains(res.Error, tc.errContains) {
				t.Errorf("error = %q, want it to contain %q", res.Error, tc.errContains)
			}
		})
	}
}

func TestIntegrationMemoryBomb(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	// Twice the limit, touched page by page so that it is really resident.
	res := run(t, e, job("b = bytearray(128 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('survived')",
		withLimits(limits.Limits{Memory: 64 * limits.MiB})))
	want(t, res, jobs.StatusOOM)
	if strings.Contains(res.Stdout, "survived") {
		t.Fatal("the bomb survived")
	}
}

func TestIntegrationForkBomb(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	const pids = 32
	code := `import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as err:
    print("held", n, err.errno)
`
	res := run(t, e, job(code, withLimits(limits.Limits{Pids: pids, Timeout: limits.Duration(20 * time.Second)})))
	want(t, res, jobs.StatusSucceeded)
	var n, errno int
	if _, err := fmt.Sscanf(res.Stdout, "held %d %d", &n, &errno); err != nil || n >= pids || errno != 11 {
		t.Fatalf("fork bomb not held by pids=%d: stdout %q (want EAGAIN=11 before %d forks)", pids, res.Stdout, pids)
	}
	// A shell fork bomb, then the next job must run normally. Whether the
	// bomb's own shell can still fork its sleep is a race it may lose
	// (failed, exit 2) or win (timeout); either way it is held.
	res = run(t, e, job(`f() { f | f & }; f; sleep 30`, func(j *jobs.Job) {
		j.Image = "shell"
		j.Limits = limits.Limits{Pids: pids, Timeout: limits.Duration(3 * time.Second)}
	}))
	if res.Status != jobs.StatusTimeout && (res.Status != jobs.StatusFailed || res.Exit == nil || *res.Exit != 2) {
		t.Fatalf("shell fork bomb: status %s exit %v error %q, want timeout or failed with the shell's exit 2", res.Status, derefInt(res.Exit), res.Error)
	}
	res = run(t, e, job("print('after')"))
	want(t, res, jobs.StatusSucceeded)
	if res.Stdout != "after\n" {
		t.Fatalf("next job's stdout = %q", res.Stdout)
	}
}

func TestIntegrationTimeout(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"busy loop":       "while True: pass",
		"ignores SIGTERM": "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready')\ntime.sleep(600)",
	}
	for name, code := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, nil) // a worker of its own: the leftover check below is per worker
			const limit = 2 * time.Second
			start := time.Now()
			res := run(t, e, job(code, withLimits(limits.Limits{Timeout: limits.Duration(limit)})))
			// Run returns once the container exited; its removal may still
			// run in the background. Both are "gone".
			e.removing.Wait()
			took := time.Since(start)
			want(t, res, jobs.StatusTimeout)
			if res.Exit != nil {
				t.Errorf("exit = %d, want null for a timeout", *res.Exit)
			}
			// The job would run for ten minutes (or forever) on its own:
			// a verdict well before that proves the kill. How promptly is
			// logged, not asserted: a loaded engine answers slowly.
			if took > limit+30*time.Second {
				t.Errorf("Run took %s for a %s limit: the job was not killed at its limit", took, limit)
			}
			assertNoLeftovers(t, e.cfg.Client, e.cfg.WorkerID)
			t.Logf("timeout verdict and removal after %s", took)
		})
	}
}

// A create the engine answers after its deadline (a sandbox's, or that of
// the container an image's user tables are read from): the executor gives
// up on it, the engine makes the container anyway, and the executor looks
// for it by name and removes it. Before, it looked once, at once, found nothing,
// and the container stayed until the worker restarted (its own Reap spares
// its own instance).
func TestIntegrationLateCreateRemoved(t *testing.T) {
	cli := requireDocker(t)
	workerID := "test-latecreate-" + randHex(3)
	tune := defaultTuning
	tune.calls.create = 10 * time.Millisecond // an engine slower than the deadline
	e, err := newTuned(Config{WorkerID: workerID}, cli, tune)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Close()
		if r, err := New(Config{Client: cli, WorkerID: workerID}); err == nil { // whatever the outcome
			_, _ = r.Reap(context.Background())
			r.Close()
		}
	})
	since := time.Now()
	for i := range 10 {
		if i == 5 {
			// The first five were abandoned at the create of the container
			// the image's user tables are read from; the next five at the
			// sandbox's own, the tables read (as the first launch of an
			// image would have).
			id, err := e.resolveImage(context.Background(), DefaultImage, false)
			if err != nil {
				t.Fatal(err)
			}
			read := &imageTables{done: make(chan struct{})}
			close(read.done)
			e.users.mu.Lock()
			e.users.images[id] = read
			e.users.mu.Unlock()
		}
		_, err := e.Run(context.Background(), &jobs.Job{ID: "late-" + strconv.Itoa(i), Image: "python", Code: "print(1)"}, jobrun.Options{})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Run %d = %v, want the create's deadline", i, err)
		}
	}
	// The engine's own record of the creates it made after the deadlines.
	made := func() int {
		stamp := func(tm time.Time) string { return fmt.Sprintf("%d.%09d", tm.Unix(), tm.Nanosecond()) }
		out, err := exec.Command("docker", "events", "--since", stamp(since), "--until", stamp(time.Now()),
			"--filter", "type=container", "--filter", "event=create", "--filter", "label="+LabelWorker+"="+workerID,
			"--format", "{{.ID}}").Output()
		if err != nil {
			t.Fatalf("docker events: %v", err)
		}
		return len(strings.Fields(string(out)))
	}
	deadline := time.Now().Add(10 * time.Second)
	for made() == 0 {
		if time.Now().After(deadline) {
			t.Skip("the engine made none of the 10 containers whose creates were abandoned: nothing to remove this time")
		}
		time.Sleep(100 * time.Millisecond)
	}
	testutil.Eventually(t, 20*time.Second, "the late containers removed", func() bool { return len(listOf(t, cli, workerID)) == 0 })
	t.Logf("%d containers made after their creates' deadlines, all removed", made())
}
