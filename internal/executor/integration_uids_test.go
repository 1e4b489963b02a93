package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
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

// claimedSpec is the spec of a container of e for jobID on the default
// image and limits, under a uid e claims, as a launch makes it.
func claimedSpec(t testing.TB, e *Executor, jobID string) client.ContainerCreateOptions {
	t.Helper()
	uid, err := e.uids.claim(nil)
	if err != nil {
		t.Fatal(err)
	}
	return e.containerSpec(DefaultImage, jobID, limits.Default(), uid, nil, nil)
}

// hogAllowances spends, as far as the kernel lets it, what the kernel
// allows each user: pipe pages (fs.pipe-user-pages-soft: past it a user's
// new pipes get 8 KiB and F_SETPIPE_SZ fails), inotify instances
// (fs.inotify.max_user_instances) and queued signals (RLIMIT_SIGPENDING,
// counted per user), then holds them until it is killed. Each loop is
// bounded, for a kernel (gVisor's) that counts none of them.
const hogAllowances = `import ctypes, errno, fcntl, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
F_SETPIPE_SZ, F_GETPIPE_SZ = 1031, 1032
pipes, small, wide = [], 0, 0
while len(pipes) < 400:
    r, w = os.pipe()
    pipes.append((r, w))
    if fcntl.fcntl(w, F_GETPIPE_SZ) < 65536:
        small = fcntl.fcntl(w, F_GETPIPE_SZ)
        break
    try:
        fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)
        wide += 1
    except OSError as err:
        if err.errno != errno.EPERM:
            raise
inotify = 0
while inotify < 400:
    if libc.inotify_init() < 0:
        print("inotify stopped by errno", ctypes.get_errno())
        break
    inotify += 1
# sigqueue, not kill: the kernel lets kill's signals past the limit.
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
queued, pid, rt, zero = 0, os.getpid(), int(signal.SIGRTMIN), ctypes.c_void_p(0)
while queued < 1 << 18:
    if libc.sigqueue(pid, rt, zero) < 0:
        print("signals stopped by errno", ctypes.get_errno())
        break
    queued += 1
print("hog ready: wide pipes", wide, "small pipe", small, "inotify", inotify, "queued", queued, flush=True)
time.sleep(25)
`

// victimAllowances reports what a job sees of the same allowances.
const victimAllowances = `import ctypes, fcntl, os, signal
libc = ctypes.CDLL(None, use_errno=True)
F_SETPIPE_SZ, F_GETPIPE_SZ = 1031, 1032
r, w = os.pipe()
print("pipe", fcntl.fcntl(w, F_GETPIPE_SZ))
try:
    fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)
    print("setpipe", fcntl.fcntl(w, F_GETPIPE_SZ))
except OSError as err:
    print("setpipe errno", err.errno)
def rc(r):
    return "ok" if r >= 0 else "errno %d" % ctypes.get_errno()
print("inotify_init", rc(libc.inotify_init()))
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
print("sigqueue", rc(libc.sigqueue(os.getpid(), int(signal.SIGRTMIN), ctypes.c_void_p(0))))
timer = ctypes.c_void_p()
print("timer_create", rc(libc.timer_create(1, None, ctypes.byref(timer))))
print("uid", os.getuid(), "workspace owner", os.stat(".").st_uid, "tmp owner", os.stat("/tmp").st_uid)
`

// TestIntegrationRedTeamUserAllowances: a job that spends its user's
// kernel allowances (pipe pages, inotify instances, queued signals) while
// another runs leaves the other's untouched: each sandbox is a uid of its
// own. On one shared uid the victim's new pipe had 8 KiB, F_SETPIPE_SZ
// failed with EPERM, inotify_init with EMFILE and sigqueue and
// timer_create with EAGAIN.
func TestIntegrationRedTeamUserAllowances(t *testing.T) {
	t.Parallel()
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		hogCtx, stopHog := context.WithCancel(ctx)
		defer stopHog()
		var (
			mu     sync.Mutex
			hogOut bytes.Buffer
		)
		ready := make(chan struct{})
		var readyOnce sync.Once
		type ran struct {
			res *jobs.Result
			err error
		}
		var hog ran
		hogEnded := make(chan struct{})
		// Waited for on every path: setup's clean-up looks for leftovers.
		defer func() {
			stopHog()
			<-hogEnded
		}()
		go func() {
			defer close(hogEnded)
			res, err := e.Run(hogCtx, job(hogAllowances), jobrun.Options{OnOutput: func(_ jobs.Stream, p []byte) {
				mu.Lock()
				defer mu.Unlock()
				hogOut.Write(p)
				// The whole line: it may come in pieces.
				if _, rest, ok := strings.Cut(hogOut.String(), "hog ready"); ok && strings.Contains(rest, "\n") {
					readyOnce.Do(func() { close(ready) })
				}
			}})
			hog = ran{res, err}
		}()
		select {
		case <-ready:
		case <-hogEnded:
			t.Fatalf("the hog ended before it was ready: %+v, %v", hog.res, hog.err)
		case <-ctx.Done():
			t.Fatal("the hog never got ready")
		}
		mu.Lock()
		report := hogOut.String()
		mu.Unlock()
		t.Logf("hog: %s", strings.TrimSpace(report))
		if e.cfg.Runtime == "runc" {
			// The host's kernel counts them: the hog really spent them.
			for _, s := range []string{"small pipe 8192", "inotify stopped by errno 24", "signals stopped by errno 11"} {
				if !strings.Contains(report, s) {
					t.Fatalf("the hog did not spend its allowances (no %q): %s", s, report)
				}
			}
		}

		res := run(t, e, job(victimAllowances))
		stopHog()
		<-hogEnded
		if hog.err != nil || hog.res.Status != jobs.StatusCanceled {
			t.Errorf("hog: %+v, %v; want canceled", hog.res, hog.err)
		}
		want(t, res, jobs.StatusSucceeded)
		t.Logf("victim: %s", strings.TrimSpace(res.Stdout))
		var missing []string
		for _, s := range []string{"pipe 65536\n", "setpipe 1048576\n", "inotify_init ok\n", "sigqueue ok\n", "timer_create ok\n"} {
			if !strings.Contains(res.Stdout, s) {
				missing = append(missing, s)
			}
		}
		if len(missing) > 0 {
			t.Errorf("the victim lacks %q:\n%s", missing, res.Stdout)
		}
		// Its working directory and /tmp are its own uid's.
		var uid, ws, tmp int
		i := strings.Index(res.Stdout, "uid ")
		if _, err := fmt.Sscanf(res.Stdout[max(i, 0):], "uid %d workspace owner %d tmp owner %d", &uid, &ws, &tmp); err != nil || ws != uid || tmp != uid {
			t.Errorf("uid and owners: %v\n%s", err, res.Stdout)
		}
	})
}

// TestIntegrationUIDsNeverShared: no two containers on the engine run as
// one uid, whoever made them. In a range of four, a leftover of a
// worker's previous run holds one and another worker's warm pool two; the
// restarted worker's job gets the fourth, and while it runs its next job
// finds none free: an infrastructure error, not a shared uid, and not a
// verdict on whether sandboxes start.
func TestIntegrationUIDsNeverShared(t *testing.T) {
	t.Parallel()
	// A range of the test's own, far above DefaultUIDs, so that no other
	// test's sandboxes are in it.
	first := uint32(1_000_000_000 + mrand.IntN(1_000_000)*4)
	r := UIDRange{First: first, Last: first + 3}
	withRange := func(c *Config) { c.UIDs = r }
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	prev := setup(t, withRange)
	left, err := prev.api.ContainerCreate(ctx, claimedSpec(t, prev, "leftover"))
	if err != nil {
		t.Fatal(err)
	}
	// Started without an attach: its launcher waits for an envelope for ever.
	if _, err := prev.api.ContainerStart(ctx, left.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	other := setup(t, func(c *Config) { c.UIDs = r; c.Pool = 2 })
	if err := testutil.Poll(ctx, 60*time.Second, 50*time.Millisecond, func(context.Context) error {
		if st := other.PoolStats(); st.Idle < 2 {
			return fmt.Errorf("%d warm sandboxes", st.Idle)
		}
		return nil
	}); err != nil {
		t.Fatalf("the other worker's pool did not fill: %v", err)
	}
	held := map[string]bool{}
	for _, w := range []string{prev.cfg.WorkerID, other.cfg.WorkerID} {
		list, err := prev.cfg.Client.ContainerList(ctx, client.ContainerListOptions{All: true,
			Filters: make(client.Filters).Add("label", LabelWorker+"="+w)})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range list.Items {
			if held[c.Labels[LabelUID]] {
				t.Fatalf("uid %s held twice", c.Labels[LabelUID])
			}
			held[c.Labels[LabelUID]] = true
		}
	}
	if len(held) != 3 {
		t.Fatalf("held uids %v, want the leftover's and two warm sandboxes'", held)
	}

	restarted, err := New(prev.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := restarted.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	jobCtx, stopJob := context.WithCancel(ctx)
	defer stopJob()
	uidC := make(chan string, 1)
	var once sync.Once
	var (
		res    *jobs.Result
		runErr error
	)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		var out bytes.Buffer
		res, runErr = restarted.Run(jobCtx, job("import os, time\nprint('uid', os.getuid(), flush=True)\ntime.sleep(25)"),
			jobrun.Options{OnOutput: func(_ jobs.Stream, p []byte) {
				out.Write(p)
				if s, ok := strings.CutSuffix(out.String(), "\n"); ok {
					once.Do(func() { uidC <- strings.TrimPrefix(s, "uid ") })
				}
			}})
	}()
	defer func() {
		stopJob()
		<-ended
	}()
	var uid string
	select {
	case uid = <-uidC:
	case <-ended:
		t.Fatalf("the job ended before it told its uid: %+v, %v", res, runErr)
	}
	if n, err := strconv.ParseUint(uid, 10, 32); err != nil || held[uid] || uint32(n) < r.First || uint32(n) > r.Last {
		t.Fatalf("the restarted worker's job runs as uid %s; held %v, range %s", uid, held, r)
	}

	_, err = restarted.Run(ctx, job("print('ran')"), jobrun.Options{})
	if !errors.Is(err, errNoUID) || !errors.Is(err, ErrInfrastructure) {
		t.Fatalf("a job with every uid held: %v, want errNoUID", err)
	}
	t.Logf("with every uid held: %v", err)
	if err := restarted.StartErr(); err != nil {
		t.Fatalf("no free uid was taken for sandboxes that do not start: %v", err)
	}

	stopJob()
	<-ended
	if runErr != nil || res.Status != jobs.StatusCanceled {
		t.Fatalf("the job holding the last uid: %+v, %v; want canceled", res, runErr)
	}
	if n, err := restarted.Reap(ctx); err != nil || n != 1 {
		t.Fatalf("Reap = %d, %v; want the leftover", n, err)
	}
	want(t, run(t, restarted, job("print('ran')")), jobs.StatusSucceeded)
}
