package executor

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// faultyEngine is an engine at the dockerAPI boundary whose faults the
// test switches: calls that fail, calls that never return (whatever their
// context says, until the test ends or releases them). Its containers run
// nothing: a started one waits for its stdin like a warm sandbox. It
// keeps the books a fault test checks: containers created, removed, left.
type faultyEngine struct {
	mu                                      sync.Mutex
	pingErr, createErr, attachErr, startErr error
	listErr                                 error
	hang                                    map[string]chan struct{} // call → closed to release it
	list                                    []container.Summary      // what ContainerList returns
	calls                                   map[string]int
	created                                 int
	alive                                   map[string]string // ID → name of containers that exist
	inspectedGone                           map[string]bool   // IDs an inspect found gone after their removal
	released                                chan struct{}     // closed by the test's cleanup: every hang returns
	releaseOnce                             sync.Once
}

var _ dockerAPI = (*faultyEngine)(nil)

func newFaultyEngine(t *testing.T) *faultyEngine {
	f := &faultyEngine{hang: map[string]chan struct{}{}, calls: map[string]int{}, alive: map[string]string{},
		inspectedGone: map[string]bool{}, released: make(chan struct{})}
	t.Cleanup(func() { f.releaseOnce.Do(func() { close(f.released) }) })
	return f
}

// set changes the engine's faults under its lock.
func (f *faultyEngine) set(change func(f *faultyEngine)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}

// wedge makes call never return until unwedge (or the test's end).
func (f *faultyEngine) wedge(call string) {
	f.set(func(f *faultyEngine) { f.hang[call] = make(chan struct{}) })
}

func (f *faultyEngine) unwedge(call string) {
	f.set(func(f *faultyEngine) {
		close(f.hang[call])
		delete(f.hang, call)
	})
}

// enter counts the call, blocks while it is wedged (ignoring ctx, as a
// client that does not honour it would), and returns the error of err.
func (f *faultyEngine) enter(call string, err *error) error {
	f.mu.Lock()
	f.calls[call]++
	h := f.hang[call]
	f.mu.Unlock()
	if h != nil {
		select {
		case <-h:
		case <-f.released:
		}
	}
	if err == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return *err
}

func (f *faultyEngine) count(call string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[call]
}

func (f *faultyEngine) books() (created int, left []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.alive {
		left = append(left, id)
	}
	return f.created, left
}

func (f *faultyEngine) ContainerCreate(ctx context.Context, o client.ContainerCreateOptions) (client.ContainerCreateResult, error) {
	if err := f.enter("create", &f.createErr); err != nil {
		return client.ContainerCreateResult{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created++
	id := strings.Repeat("c", 60) + string(rune('a'+f.created%26)) + string(rune('a'+f.created/26%26)) + "00"
	f.alive[id] = o.Name
	return client.ContainerCreateResult{ID: id}, nil
}

func (f *faultyEngine) ContainerAttach(ctx context.Context, id string, o client.ContainerAttachOptions) (client.ContainerAttachResult, error) {
	if err := f.enter("attach", &f.attachErr); err != nil {
		return client.ContainerAttachResult{}, err
	}
	stdinR, stdinW := io.Pipe()
	outR, outW := io.Pipe()
	go func() { // the container reads its stdin until the client closes it
		_, _ = io.Copy(io.Discard, stdinR)
		outW.Close()
	}()
	conn := &pipeConn{stdin: stdinW, out: outR}
	return client.ContainerAttachResult{HijackedResponse: client.HijackedResponse{Conn: conn, Reader: bufio.NewReader(outR)}}, nil
}

func (f *faultyEngine) ContainerWait(ctx context.Context, id string, o client.ContainerWaitOptions) client.ContainerWaitResult {
	f.enter("wait", nil)
	return client.ContainerWaitResult{Result: make(chan container.WaitResponse), Error: make(chan error)}
}

func (f *faultyEngine) ContainerStart(ctx context.Context, id string, o client.ContainerStartOptions) (client.ContainerStartResult, error) {
	if err := f.enter("start", &f.startErr); err != nil {
		return client.ContainerStartResult{}, err
	}
	return client.ContainerStartResult{}, nil
}

func (f *faultyEngine) ContainerKill(ctx context.Context, id string, o client.ContainerKillOptions) (client.ContainerKillResult, error) {
	return client.ContainerKillResult{}, f.enter("kill", nil)
}

func (f *faultyEngine) find(idOrName string) (string, bool) {
	for id, name := range f.alive {
		if id == idOrName || name == idOrName {
			return id, true
		}
	}
	return "", false
}

func (f *faultyEngine) ContainerInspect(ctx context.Context, idOrName string, o client.ContainerInspectOptions) (client.ContainerInspectResult, error) {
	f.enter("inspect", nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.find(idOrName); !ok {
		f.inspectedGone[idOrName] = true
		return client.ContainerInspectResult{}, cerrdefs.ErrNotFound
	}
	return client.ContainerInspectResult{Container: container.InspectResponse{State: &container.State{}}}, nil
}

func (f *faultyEngine) ContainerRemove(ctx context.Context, idOrName string, o client.ContainerRemoveOptions) (client.ContainerRemoveResult, error) {
	f.enter("remove", nil)
	f.enter("remove "+idOrName, nil) // a single container can be wedged
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.find(idOrName)
	if !ok {
		return client.ContainerRemoveResult{}, cerrdefs.ErrNotFound
	}
	delete(f.alive, id)
	return client.ContainerRemoveResult{}, nil
}

func (f *faultyEngine) ContainerList(ctx context.Context, o client.ContainerListOptions) (client.ContainerListResult, error) {
	if err := f.enter("list", &f.listErr); err != nil {
		return client.ContainerListResult{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var items []container.Summary
	for _, c := range f.list {
		if _, ok := f.alive[c.ID]; ok {
			items = append(items, c)
		}
	}
	return client.ContainerListResult{Items: items}, nil
}

func (f *faultyEngine) CopyFromContainer(ctx context.Context, id string, o client.CopyFromContainerOptions) (client.CopyFromContainerResult, error) {
	return client.CopyFromContainerResult{}, f.enter("copy", nil)
}

func (f *faultyEngine) ImageInspect(ctx context.Context, image string, o ...client.ImageInspectOption) (client.ImageInspectResult, error) {
	return client.ImageInspectResult{}, f.enter("image", nil)
}

func (f *faultyEngine) Ping(ctx context.Context, o client.PingOptions) (client.PingResult, error) {
	return client.PingResult{}, f.enter("ping", &f.pingErr)
}

func (f *faultyEngine) Info(ctx context.Context, o client.InfoOptions) (client.SystemInfoResult, error) {
	return client.SystemInfoResult{}, f.enter("info", &f.pingErr)
}

// fastTuning shrinks the start back-off so that a test of it takes
// milliseconds, and the deadlines to 2 s: far above what the fake takes,
// even on a loaded machine. A test of a deadline shrinks that one.
var fastTuning = tuning{
	calls: callDeadlines{ping: 2 * time.Second, info: 2 * time.Second, list: 2 * time.Second, image: 2 * time.Second,
		create: 2 * time.Second, attach: 2 * time.Second, wait: 2 * time.Second, start: 2 * time.Second,
		inspect: 2 * time.Second, kill: 2 * time.Second, remove: 2 * time.Second, copy: 2 * time.Second},
	starts: startTuning{first: 40 * time.Millisecond, max: 160 * time.Millisecond, cap: 100, window: time.Minute},
	stuck:  stuckTuning{first: 40 * time.Millisecond, max: 160 * time.Millisecond},
}

func faultyExecutor(t *testing.T, f *faultyEngine, tune tuning, mod func(*Config)) (*Executor, *testutil.Buffer) {
	t.Helper()
	logs := &testutil.Buffer{}
	cfg := Config{WorkerID: "w", Runtime: "broken", Logger: slog.New(slog.NewTextHandler(logs, nil))}
	if mod != nil {
		mod(&cfg)
	}
	e, err := newTuned(cfg, f, tune)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if t.Failed() {
			t.Logf("executor logs:\n%s", logs.String())
		}
	})
	return e, logs
}

// A runtime that fails every start while the engine answers its ping: a
// held job retried in a loop (Run as fast as it returns), the worker's
// prober (Check as fast as it returns) and the warm pool together make at
// most one container per back-off step, each removed and checked gone;
// the back-off grows across attempts, successful pings do not reset it,
// and the pool stops refilling and says so. Once the runtime is fixed,
// the next attempt (within one step) starts a sandbox, and everything
// serves again.
func TestFailingStartsBackOff(t *testing.T) {
	t.Parallel()
	f := newFaultyEngine(t)
	boom := errors.New("OCI runtime create failed: cannot run with network enabled in root network namespace")
	f.set(func(f *faultyEngine) { f.startErr = boom })
	e, logs := faultyExecutor(t, f, fastTuning, func(c *Config) { c.Pool = 2 })

	err := e.Check(context.Background())
	var se *StartError
	if !errors.As(err, &se) || !errors.Is(err, ErrSandboxStart) || !errors.Is(err, ErrInfrastructure) || !errors.Is(err, boom) {
		t.Fatalf("Check with a failing runtime = %v, want a StartError wrapping ErrSandboxStart and the engine's error", err)
	}
	if want := "runtime broken: cannot start sandboxes: start container: " + boom.Error(); err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}

	// Hammer it for 600 ms, as a worker retrying a held job in a tight loop
	// would, while the prober checks and the pool wants 2 sandboxes.
	// Retries are due after 40, 80, 160, 160... ms: about 6 attempts.
	var retries []time.Duration
	deadline := time.Now().Add(600 * time.Millisecond)
	ctx := context.Background()
	for time.Now().Before(deadline) {
		before := f.count("create")
		_, err := e.Run(ctx, &jobs.Job{ID: "held", Image: "python", Code: "print(1)"}, jobrun.Options{})
		if !errors.As(err, &se) {
			t.Fatalf("Run = %v, want a StartError", err)
		}
		if err := e.Check(ctx); !errors.As(err, &se) {
			t.Fatalf("Check = %v, want a StartError", err)
		}
		if f.count("create") > before {
			retries = append(retries, se.RetryAfter())
		}
	}
	created, left := f.books()
	t.Logf("%d containers created in 600 ms of failing starts (retries due after %v)", created, retries)
	if created < 3 || created > 8 {
		t.Errorf("%d containers created in 600 ms; the back-off (40 ms doubling to 160 ms) allows about 6", created)
	}
	if len(left) > 0 {
		t.Errorf("containers left behind: %v", left)
	}
	if got := len(f.inspectedGone); got < created {
		t.Errorf("%d of %d removed containers were checked gone", got, created)
	}
	// Each retry waits at least as long as the one before (10% jitter): the
	// pings in between, all answered, reset nothing.
	for i := 1; i < len(retries); i++ {
		if retries[i] < retries[i-1]*8/10 {
			t.Errorf("retry %d due after %s, sooner than the one before (%s): the back-off was reset", i, retries[i], retries[i-1])
		}
	}
	if st := e.PoolStats(); !st.Halted || st.Idle != 0 {
		t.Errorf("pool %+v, want halted and empty", st)
	}
	if n := strings.Count(logs.String(), "warm pool: not refilling"); n != 1 {
		t.Errorf("the pool said %d times that it is not refilling, want once", n)
	}
	if e.StartErr() == nil {
		t.Error("StartErr is nil while starts fail")
	}

	// Fixed: the next due attempt starts a sandbox, and the pool refills.
	f.set(func(f *faultyEngine) { f.startErr = nil })
	fixed := time.Now()
	testutil.Eventually(t, 10*time.Second, "Check to pass after the fix", func() bool { return e.Check(ctx) == nil })
	if d := time.Since(fixed); d > fastTuning.starts.max+500*time.Millisecond {
		t.Errorf("serving again %s after the fix; one back-off step is at most %s", d, fastTuning.starts.max)
	}
	pooled := 0 // the optional images' pools fill from their first job on
	for _, img := range e.images {
		if !e.optional[img] {
			pooled++
		}
	}
	testutil.Eventually(t, 10*time.Second, "the pool to refill", func() bool { st := e.PoolStats(); return st.Idle == 2*pooled && !st.Halted })
	if e.StartErr() != nil {
		t.Errorf("StartErr = %v after a sandbox started", e.StartErr())
	}
	if !strings.Contains(logs.String(), "sandboxes start again") || !strings.Contains(logs.String(), "warm pool: refilling") {
		t.Errorf("the recovery was not logged:\n%s", logs)
	}
}

// While starts fail, no more than the cap of containers is made in a
// window, whatever the back-off says (here it would allow one every ms).
func TestFailingStartsCapped(t *testing.T) {
	t.Parallel()
	f := newFaultyEngine(t)
	f.set(func(f *faultyEngine) { f.createErr = errors.New("no space left on device") })
	tune := fastTuning
	tune.starts = startTuning{first: time.Millisecond, max: time.Millisecond, cap: 3, window: time.Hour}
	e, _ := faultyExecutor(t, f, tune, nil)
	for range 50 {
		err := e.Check(context.Background())
		var se *StartError
		if !errors.As(err, &se) {
			t.Fatalf("Check = %v, want a StartError", err)
		}
		time.Sleep(2 * time.Millisecond) // past every back-off step: only the cap holds
	}
	if n := f.count("create"); n != 3 {
		t.Fatalf("%d creations in the window, want the cap, 3", n)
	}
	var se *StartError
	if err := e.Check(context.Background()); !errors.As(err, &se) || se.RetryAfter() < 59*time.Minute {
		t.Fatalf("Check = %v; want a retry once the oldest failure leaves the window (an hour)", err)
	}
}

// The first launch of an executor is a trial: until a sandbox started,
// launches go one at a time, so a runtime broken from the start costs one
// container, not one per slot and warm sandbox.
func TestFirstLaunchIsATrial(t *testing.T) {
	t.Parallel()
	f := newFaultyEngine(t)
	f.set(func(f *faultyEngine) { f.startErr = errors.New("exec format error") })
	f.wedge("start") // hold the first launch in flight until its deadline
	tune := fastTuning
	tune.calls.start = time.Second
	tune.starts.first, tune.starts.max = time.Minute, time.Minute // no second attempt in this test
	e, _ := faultyExecutor(t, f, tune, func(c *Config) { c.Pool = 3 })
	testutil.Eventually(t, 10*time.Second, "the pool's first launch", func() bool { return f.count("start") == 1 })
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = e.Run(context.Background(), &jobs.Job{ID: "j", Image: "python"}, jobrun.Options{})
		})
	}
	// The pool's trial meets the start deadline (1 s): one failure, and the
	// Runs waiting for it are denied without a container of their own.
	wg.Wait()
	for _, err := range errs {
		if !errors.Is(err, ErrSandboxStart) {
			t.Errorf("Run = %v, want ErrSandboxStart", err)
		}
	}
	if n := f.count("create"); n != 1 {
		t.Errorf("%d containers created, want 1 (the trial)", n)
	}
	f.unwedge("start")
	testutil.Eventually(t, 10*time.Second, "the trial's container removed", func() bool { _, left := f.books(); return len(left) == 0 })
}

// An engine call that never returns, whatever its context says, is
// abandoned at its deadline: Check returns, saying why, and a create
// answered after its deadline has its container removed, since nobody
// else knows of it.
func TestWedgedCallsAreAbandoned(t *testing.T) {
	t.Parallel()
	f := newFaultyEngine(t)
	tune := fastTuning
	tune.calls.ping = 50 * time.Millisecond
	e, _ := faultyExecutor(t, f, tune, nil)

	f.wedge("ping")
	start := time.Now()
	err := e.Check(context.Background())
	took := time.Since(start)
	if !errors.Is(err, ErrInfrastructure) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "docker ping: no answer from the Docker engine within 50ms") {
		t.Fatalf("Check on a wedged ping = %v", err)
	}
	if took < 50*time.Millisecond || took > time.Second {
		t.Errorf("Check returned after %s; the ping's deadline is 50ms", took)
	}
	f.unwedge("ping")

	// A create that answers late: the launch gives up at its deadline, the
	// engine answers the ping (a start failure), and the container made
	// after all is removed.
	f.wedge("create")
	tune = fastTuning
	tune.calls.create = 100 * time.Millisecond
	e, _ = faultyExecutor(t, f, tune, nil)
	_, err = e.Run(context.Background(), &jobs.Job{ID: "late", Image: "python"}, jobrun.Options{})
	if !errors.Is(err, ErrSandboxStart) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run on a wedged create = %v, want ErrSandboxStart and DeadlineExceeded", err)
	}
	f.unwedge("create")
	testutil.Eventually(t, 10*time.Second, "the late container removed", func() bool {
		created, left := f.books()
		return created == 1 && len(left) == 0
	})
}

// Reap skips what it cannot remove: a container wedged in the engine costs
// one remove deadline and one log line, once, and the others are removed.
func TestReapSkipsAWedgedContainer(t *testing.T) {
	t.Parallel()
	f := newFaultyEngine(t)
	tune := fastTuning
	tune.calls.remove = 300 * time.Millisecond
	tune.stuck.first = time.Hour // the background retries stay out of the count
	e, logs := faultyExecutor(t, f, tune, nil)
	leftover := func(id string) container.Summary {
		return container.Summary{ID: id, Labels: map[string]string{LabelManaged: "true", LabelWorker: "w", LabelInstance: "crashed"}}
	}
	f.set(func(f *faultyEngine) {
		f.list = []container.Summary{leftover("aaaaaaaaaaaa1"), leftover("wedgedwedged2"), leftover("cccccccccccc3")}
		for _, c := range f.list {
			f.alive[c.ID] = ""
		}
	})
	f.wedge("remove wedgedwedged2")
	for i := range 3 {
		n, err := e.Reap(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if want := []int{2, 0, 0}[i]; n != want {
			t.Errorf("Reap %d removed %d, want %d", i, n, want)
		}
	}
	if n := f.count("remove wedgedwedged2"); n != 1 {
		t.Errorf("the wedged container's removal was tried %d times, want once", n)
	}
	if n := e.Unremovable(); n != 1 {
		t.Errorf("Unremovable = %d, want the wedged one", n)
	}
	if n := strings.Count(logs.String(), "cannot be removed; skipping it"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, logs)
	}
}

// An engine that does not answer its ping says nothing about starts: a
// failed launch is an infrastructure error, not a StartError, and opens
// no back-off.
func TestEngineDownIsNotAStartFailure(t *testing.T) {
	t.Parallel()
	f := newFaultyEngine(t)
	down := errors.New("connection refused")
	f.set(func(f *faultyEngine) { f.createErr, f.pingErr = down, down })
	e, _ := faultyExecutor(t, f, fastTuning, nil)
	_, err := e.Run(context.Background(), &jobs.Job{ID: "j", Image: "python", Limits: limits.Limits{}}, jobrun.Options{})
	if !errors.Is(err, ErrInfrastructure) || errors.Is(err, ErrSandboxStart) {
		t.Fatalf("Run with the engine down = %v, want ErrInfrastructure, not ErrSandboxStart", err)
	}
	if e.StartErr() != nil {
		t.Fatalf("StartErr = %v", e.StartErr())
	}
	f.set(func(f *faultyEngine) { f.createErr, f.pingErr = nil, nil })
	if err := e.Check(context.Background()); err != nil {
		t.Fatalf("Check once the engine is back = %v", err)
	}
	if n := f.count("start"); n != 1 {
		t.Errorf("Check started %d sandboxes, want 1 (the runtime check)", n)
	}
	testutil.Eventually(t, 10*time.Second, "the runtime check's sandbox removed", func() bool { _, left := f.books(); return len(left) == 0 })
}

// An executor configured with no preset has nothing to start: Check asks
// only the engine.
func TestCheckWithoutPresets(t *testing.T) {
	t.Parallel()
	f := newFaultyEngine(t)
	e, _ := faultyExecutor(t, f, fastTuning, func(c *Config) { c.Presets = map[string]Preset{} })
	if err := e.Check(context.Background()); err != nil || f.count("create") != 0 {
		t.Fatalf("Check = %v with %d creations, want nil and none", err, f.count("create"))
	}
}

// A panic while the job runs (in the caller's OnStart, or a bug), which
// internal/worker recovers into an error result, still removes the sandbox:
// nothing else would stop it.
func TestPanicInRunRemovesTheSandbox(t *testing.T) {
	t.Parallel()
	f := newFaultyEngine(t)
	e, _ := faultyExecutor(t, f, fastTuning, nil)
	if err := e.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the check's sandbox removed", func() bool { _, left := f.books(); return len(left) == 0 })
	panicked := func() (p any) {
		defer func() { p = recover() }()
		_, _ = e.Run(context.Background(), &jobs.Job{ID: "p", Image: "python", Code: "print(1)"},
			jobrun.Options{OnStart: func(jobrun.Start) { panic("a bug") }})
		return nil
	}()
	if panicked == nil {
		t.Fatal("OnStart's panic did not reach the caller")
	}
	testutil.Eventually(t, 10*time.Second, "the panicked job's sandbox removed", func() bool { _, left := f.books(); return len(left) == 0 })
}

// An engine that never answers the wait's registration: the launch gives
// up at the wait's deadline and removes its container, for a job's sandbox
// (Run returns an infrastructure error) and for the pool's (Close returns).
// Before the wait had a deadline, both hung for as long as the engine did.
func TestWedgedWaitIsAbandoned(t *testing.T) {
	t.Parallel()
	tune := fastTuning
	tune.calls.wait = 200 * time.Millisecond
	f := newFaultyEngine(t)
	e, _ := faultyExecutor(t, f, tune, nil)
	if err := e.Check(context.Background()); err != nil { // a first sandbox started: starts work
		t.Fatal(err)
	}
	f.wedge("wait")
	done := make(chan error, 1)
	go func() {
		_, err := e.Run(context.Background(), &jobs.Job{ID: "w", Image: "python", Code: "print(1)"}, jobrun.Options{})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrInfrastructure) || !strings.Contains(err.Error(), "wait: no answer from the Docker engine within 200ms") {
			t.Errorf("Run on a wedged wait = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still blocked 10 s on a wedged wait whose deadline is 200ms")
	}
	testutil.Eventually(t, 10*time.Second, "the job's container removed", func() bool { _, left := f.books(); return len(left) == 0 })

	pooled, err := newTuned(Config{WorkerID: "w", Pool: 1}, f, tune)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the pool's launch at the wait", func() bool { return f.count("wait") >= 3 })
	closed := make(chan error, 1)
	go func() { closed <- pooled.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the pool's Close still blocked 10 s on a wedged wait")
	}
	f.unwedge("wait")
}
