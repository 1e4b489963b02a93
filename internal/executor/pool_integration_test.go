package executor

// Integration tests of the warm pool, against the real engine (gated like
// the others: see integration_test.go).

import (
	"context"
	"fmt"
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

// waitIdle polls until the pool holds n warm sandboxes and, if minAge > 0,
// the oldest of them is at least that old.
func waitIdle(t testing.TB, e *Executor, n int, minAge time.Duration) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, fmt.Sprintf("%d idle sandboxes (age %s)", n, minAge), func() bool {
		st := e.PoolStats()
		return st.Idle >= n && (minAge == 0 || oldestIdle(e) >= minAge)
	})
}

func oldestIdle(e *Executor) time.Duration {
	e.pool.mu.Lock()
	defer e.pool.mu.Unlock()
	var d time.Duration
	for _, q := range e.pool.idle {
		for _, s := range q {
			d = max(d, time.Since(s.born))
		}
	}
	return d
}

// pooledList returns the warm-pool containers of e's worker ID made by e.
func pooledList(t testing.TB, e *Executor) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := e.cfg.Client.ContainerList(ctx, client.ContainerListOptions{
		All: true,
		Filters: make(client.Filters).Add("label", LabelWorker+"="+e.cfg.WorkerID).
			Add("label", LabelPool+"=true").Add("label", LabelInstance+"="+e.instance),
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range list.Items {
		ids = append(ids, shortID(c.ID))
	}
	return ids
}

// runPooled runs j and checks that it was handed to a warm sandbox.
func runPooled(t *testing.T, e *Executor, j *jobs.Job) *jobs.Result {
	t.Helper()
	waitIdle(t, e, 1, 0)
	before := e.PoolStats().Hits
	res := run(t, e, j)
	if after := e.PoolStats().Hits; after != before+1 {
		t.Fatalf("job %s did not take a warm sandbox: hits %d → %d", j.ID, before, after)
	}
	return res
}

// Pooled containers give the verdicts fresh ones give. The pool's defaults
// are 64 MiB so that an OOM fits the default limits.
func TestIntegrationPoolVerdicts(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *Config) {
		c.Pool = 2
		c.Defaults = limits.Limits{Memory: 64 * limits.MiB}
	})
	t.Run("succeeded", func(t *testing.T) {
		res := runPooled(t, e, job("print(6*7)"))
		want(t, res, jobs.StatusSucceeded)
		wantExit(t, res, 0)
		if res.Stdout != "42\n" || res.Stderr != "" || res.CPUMS == nil || res.PeakMemoryBytes == nil {
			t.Fatalf("stdout %q stderr %q cpu %v peak %v", res.Stdout, res.Stderr, res.CPUMS, res.PeakMemoryBytes)
		}
	})
	t.Run("failed with stdin and files", func(t *testing.T) {
		res := runPooled(t, e, job("import sys, lib\nprint(lib.X, sys.stdin.read())\nsys.exit(3)", func(j *jobs.Job) {
			j.Stdin, j.Files = "from stdin", map[string]string{"lib.py": "X = 'lib'"}
		}))
		want(t, res, jobs.StatusFailed)
		wantExit(t, res, 3)
		if res.Stdout != "lib from stdin\n" {
			t.Fatalf("stdout %q", res.Stdout)
		}
	})
	t.Run("oom", func(t *testing.T) {
		res := runPooled(t, e, job("b = bytearray(128 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('survived')"))
		want(t, res, jobs.StatusOOM)
	})
	t.Run("no network", func(t *testing.T) {
		res := runPooled(t, e, job(`import os, socket
print(sorted(name for _, name in socket.if_nameindex()))
try:
    socket.create_connection(("1.1.1.1", 53), timeout=3)
    print("connect ok")
except OSError:
    print("connect failed")
`))
		want(t, res, jobs.StatusSucceeded)
		if res.Stdout != "['lo']\nconnect failed\n" {
			t.Fatalf("stdout %q", res.Stdout)
		}
	})
	t.Run("output limit", func(t *testing.T) {
		res := runPooled(t, e, job("import sys\nwhile True: sys.stdout.write('x' * 65536)"))
		want(t, res, jobs.StatusOutputLimit)
	})
	t.Run("timeout", func(t *testing.T) {
		// A timeout other than the default still fits the pool: it is our
		// timer, not the container's.
		res := runPooled(t, e, job("while True: pass", withLimits(limits.Limits{Timeout: limits.Duration(time.Second)})))
		want(t, res, jobs.StatusTimeout)
	})
	t.Run("timeout counts from the hand-off", func(t *testing.T) {
		// The warm sandbox is older than the job's whole limit: had the
		// clock started at its launch, this job would time out at once.
		const limit = 2 * time.Second
		waitIdle(t, e, 1, limit+500*time.Millisecond)
		res := runPooled(t, e, job("import time\ntime.sleep(0.5)\nprint('in time')",
			withLimits(limits.Limits{Timeout: limits.Duration(limit)})))
		want(t, res, jobs.StatusSucceeded)
		if res.Stdout != "in time\n" {
			t.Fatalf("stdout %q", res.Stdout)
		}
	})
	t.Run("canceled", func(t *testing.T) {
		waitIdle(t, e, 1, 0)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		res, err := e.Run(ctx, job("import time\ntime.sleep(60)"), jobrun.Options{})
		if err != nil {
			t.Fatal(err)
		}
		want(t, res, jobs.StatusCanceled)
	})
}

// Each warm sandbox serves one job: the container (its root mount, whose
// overlay directories are the container's own: every sandbox has the same
// hostname) differs
// from job to job, and nothing one job leaves in /tmp or the working
// directory is there for the next, however they interleave.
func TestIntegrationPoolSingleUse(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *Config) { c.Pool = 2 })
	code := `import os, hashlib
seen = [p for p in ("/tmp/mark", "/workspace/mark") if os.path.exists(p)]
for p in ("/tmp/mark", "/workspace/mark"):
    open(p, "w").write("x")
root = [l for l in open("/proc/self/mountinfo") if l.split()[4] == "/"][0]
print(hashlib.sha256(root.encode()).hexdigest()[:16], seen)
`
	const n = 8
	results := make([]*jobs.Result, n)
	var wg sync.WaitGroup
	waitIdle(t, e, 2, 0)
	for i := range n {
		if i < 2 {
			results[i] = runPooled(t, e, job(code))
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			res, err := e.Run(ctx, job(code), jobrun.Options{})
			if err != nil {
				t.Errorf("Run: %v", err)
				return
			}
			results[i] = res
		})
	}
	wg.Wait()
	hosts := map[string]bool{}
	for _, res := range results {
		if res == nil {
			continue // reported above
		}
		want(t, res, jobs.StatusSucceeded)
		host, seen, _ := strings.Cut(strings.TrimSpace(res.Stdout), " ")
		if seen != "[]" {
			t.Errorf("a job saw a previous job's files: %q", res.Stdout)
		}
		if hosts[host] {
			t.Errorf("container %s ran two jobs", host)
		}
		hosts[host] = true
	}
	if st := e.PoolStats(); st.Hits < 2 {
		t.Errorf("pool stats %+v: want at least 2 hits", st)
	}
}

// A job whose limits differ from the defaults in what the container is
// configured with, or that asks for the network, gets a fresh container.
func TestIntegrationPoolBypass(t *testing.T) {
	t.Parallel()
	caps := limits.DefaultCaps()
	caps.Network = &limits.Network{Open: true}
	e := setup(t, func(c *Config) { c.Pool = 1; c.Caps = caps; c.Egress = fakeEgress{none: true} })
	waitIdle(t, e, 1, 0)
	for _, l := range []limits.Limits{
		{Memory: 128 * limits.MiB},
		{CPUs: 0.5},
		{Pids: 32},
		{Output: 4096},
		{Tmpfs: 16 * limits.MiB},
		{Network: &limits.Network{Open: true}},
	} {
		before := e.PoolStats()
		res := run(t, e, job("print('ok')", withLimits(l)))
		want(t, res, jobs.StatusSucceeded)
		if after := e.PoolStats(); after.Hits != before.Hits || after.Misses != before.Misses {
			t.Errorf("limits %+v went through the pool: %+v → %+v", l, before, after)
		}
	}
	// The one warm sandbox is still there, unused.
	if ids := pooledList(t, e); len(ids) != 1 {
		t.Fatalf("pooled containers %v, want 1", ids)
	}
	if st := e.PoolStats(); st.Hits != 0 || st.Idle != 1 {
		t.Fatalf("pool stats %+v, want 1 idle and no hit", st)
	}
}

// Close removes every warm sandbox, including those it was launching.
func TestIntegrationPoolClose(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *Config) { c.Pool = 3 })
	waitIdle(t, e, 3, 0)
	if ids := pooledList(t, e); len(ids) != 3 {
		t.Fatalf("pooled containers %v, want 3", ids)
	}
	// Take one so that a refill is in flight while Close runs.
	res := run(t, e, job("print(1)"))
	want(t, res, jobs.StatusSucceeded)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if left := listOf(t, e.cfg.Client, e.cfg.WorkerID); len(left) != 0 {
		t.Fatalf("left after Close: %v", left)
	}
	// After Close the executor still runs jobs, without a pool.
	res = run(t, e, job("print(2)"))
	want(t, res, jobs.StatusSucceeded)
}

// A worker that crashed leaves its warm pool behind; the next one with the
// same ID reaps it, and spares its own pool.
func TestIntegrationPoolReapAfterCrash(t *testing.T) {
	t.Parallel()
	crashed := setup(t, func(c *Config) { c.Pool = 2 })
	waitIdle(t, crashed, 2, 0)
	// The crash: the process is gone, its containers are not. (The
	// executor's own Close runs at the end of the test and finds them gone.)
	next, err := New(Config{Client: crashed.cfg.Client, WorkerID: crashed.cfg.WorkerID, Pool: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { next.Close() })
	waitIdle(t, next, 1, 0)
	n, err := next.Reap(context.Background())
	if err != nil || n != 2 {
		t.Fatalf("Reap = %d, %v; want the crashed worker's 2", n, err)
	}
	if ids := pooledList(t, next); len(ids) != 1 {
		t.Fatalf("pooled containers after Reap %v, want the new worker's 1", ids)
	}
	res := runPooled(t, next, job("print('after reap')"))
	want(t, res, jobs.StatusSucceeded)
	// The crashed executor's sandboxes are dead: its pool must not hand
	// them out, and a job still runs (on a fresh or a refilled container).
	res = run(t, crashed, job("print('still works')"))
	want(t, res, jobs.StatusSucceeded)
	if res.Stdout != "still works\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
}

// A warm sandbox whose stream died (its container killed behind the pool's
// back) is retired, not handed out.
func TestIntegrationPoolDeadSandbox(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *Config) { c.Pool = 1 })
	waitIdle(t, e, 1, 0)
	ids := pooledList(t, e)
	if len(ids) != 1 {
		t.Fatalf("pooled %v", ids)
	}
	if _, err := e.api.ContainerKill(context.Background(), ids[0], client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the dead sandbox retired", func() bool { return e.PoolStats().Retired > 0 })
	res := run(t, e, job("print('ok')"))
	want(t, res, jobs.StatusSucceeded)
	if res.Stdout != "ok\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
}
