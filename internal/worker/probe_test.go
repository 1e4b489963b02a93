package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// pingScript is the fake executor with a Ping of the test's choosing,
// counted.
type pingScript struct {
	*fakeexec.Executor
	mu    sync.Mutex
	ping  func(context.Context) error
	pings []time.Time
}

func (p *pingScript) Ping(ctx context.Context) error {
	p.mu.Lock()
	p.pings = append(p.pings, time.Now())
	f := p.ping
	p.mu.Unlock()
	return f(ctx)
}

func (p *pingScript) setPing(f func(context.Context) error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ping = f
}

func (p *pingScript) pingTimes() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.pings...)
}

var _ worker.Pinger = (*pingScript)(nil)

// startWith starts a worker on exec (startWorker's settings otherwise).
func (b *bundle) startWith(t *testing.T, id string, exec worker.Executor) *worker.Worker {
	t.Helper()
	w, err := worker.New(b.js, exec, worker.Config{ID: id, Topology: b.topo, FetchWait: 200 * time.Millisecond,
		Slots: 1, Backoff: fastBackoff, NakDelay: 100 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	stop, stopNow := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(stop, context.Background()) }()
	t.Cleanup(func() {
		stopNow()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return w
}

func (b *bundle) beat(t *testing.T, id string) jobs.WorkerStatus {
	var st jobs.WorkerStatus
	if e, err := natstest.Stores(t, b.js).Workers.Get(t.Context(), id); err == nil {
		_ = json.Unmarshal(e.Value(), &st)
	}
	return st
}

// Start-up does not wait on the executor: a first ping that hangs leaves
// the worker up, beating, not ready ("executor not checked yet") and
// fetching nothing; once the ping answers, the queued job runs as attempt
// 1.
func TestNotReadyUntilTheFirstPing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	answer := make(chan struct{})
	exec := &pingScript{Executor: &fakeexec.Executor{}, ping: func(ctx context.Context) error {
		select {
		case <-answer:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "queued", Image: "python", Code: "print ok"}); err != nil {
		t.Fatal(err)
	}
	w := b.startWith(t, "slow-start", exec)
	testutil.Eventually(t, 10*time.Second, "a heartbeat saying not checked yet", func() bool {
		st := b.beat(t, "slow-start")
		return st.ID == "slow-start" && !st.Ready && st.LastError == "executor not checked yet"
	})
	if w.Ready() || exec.Total() != 0 {
		t.Fatalf("ready %v, %d runs before the executor answered", w.Ready(), exec.Total())
	}
	close(answer)
	res, err := b.client.Wait(waitCtx(t), "queued")
	if err != nil || res.Status != jobs.StatusSucceeded || res.Attempt != 1 {
		t.Fatalf("queued job: %v %+v", err, res)
	}
	testutil.Eventually(t, 10*time.Second, "a heartbeat saying ready", func() bool { return b.beat(t, "slow-start").Ready })
}

// retryLater is a Ping error that says when to try again, as
// internal/executor's StartError does.
type retryLater struct{ d time.Duration }

func (e retryLater) Error() string             { return "runtime broken: cannot start sandboxes: boom" }
func (e retryLater) RetryAfter() time.Duration { return e.d }

// A Ping error with RetryAfter paces the prober instead of its back-off
// (here 20 ms growing to 100 ms): the executor knows when an attempt can
// help. Its message is the worker's reason for not being ready.
func TestProbeFollowsRetryAfter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exec := &pingScript{Executor: &fakeexec.Executor{}, ping: func(context.Context) error { return retryLater{300 * time.Millisecond} }}
	w := b.startWith(t, "paced", exec)
	testutil.Eventually(t, 10*time.Second, "four pings", func() bool { return len(exec.pingTimes()) >= 4 })
	times := exec.pingTimes()
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap < 280*time.Millisecond {
			t.Errorf("ping %d came %s after the one before; RetryAfter said 300ms", i, gap)
		}
	}
	if st := w.Status(); st.Ready || !strings.Contains(st.LastError, "cannot start sandboxes") {
		t.Errorf("status %+v, want not ready with the ping's error", st)
	}
}

// An idle worker checks its executor every WorkerTTL/3: when the engine
// dies with no job running, the worker stops claiming to be ready, says
// why, and is ready again once the engine is back.
func TestIdleWorkerNoticesTheExecutorDown(t *testing.T) {
	t.Parallel()
	b := setupWith(t, fleet.Topology{AckWait: 2 * time.Second, WorkerTTL: 1500 * time.Millisecond})
	exec := &pingScript{Executor: &fakeexec.Executor{}, ping: func(context.Context) error { return nil }}
	w := b.startWith(t, "idle", exec)
	testutil.Eventually(t, 10*time.Second, "ready", w.Ready)
	down := errors.New("docker ping: connection refused")
	exec.setPing(func(context.Context) error { return down })
	testutil.Eventually(t, 10*time.Second, "a heartbeat saying not ready", func() bool {
		st := b.beat(t, "idle")
		return !st.Ready && st.LastError == down.Error()
	})
	exec.setPing(func(context.Context) error { return nil })
	testutil.Eventually(t, 10*time.Second, "ready again", func() bool { return w.Ready() && b.beat(t, "idle").Ready })
}
