package executor

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// With the engine down, the pool backs off instead of spinning, Check
// ends the back-off once the engine answers, jobs still get
// (infrastructure) errors from the fresh path, and Close returns. An
// engine that does not answer its ping says nothing about starts: nothing
// is a StartError.
func TestPoolBacksOffWhileTheEngineIsDown(t *testing.T) {
	t.Parallel()
	f := &fakeDocker{createErr: errors.New("daemon down"), pingErr: errors.New("daemon down")}
	e, err := newWithAPI(Config{WorkerID: "w", Pool: 2}, f)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the first failed launches", func() bool { return e.PoolStats().Failures >= 2 })
	// A spin would make thousands of calls in this second; the back-off
	// (250 ms, growing) allows a handful.
	time.Sleep(time.Second)
	if st := e.PoolStats(); st.Failures > 12 {
		t.Fatalf("%d launch attempts in about a second while the engine is down: the pool spins", st.Failures)
	}
	if err := e.Check(context.Background()); !errors.Is(err, ErrInfrastructure) || errors.Is(err, ErrSandboxStart) {
		t.Fatalf("Check with the engine down = %v, want ErrInfrastructure and not ErrSandboxStart", err)
	}
	_, err = e.Run(context.Background(), &jobs.Job{ID: "j", Image: "python", Code: "print(1)"}, jobrun.Options{})
	if !errors.Is(err, ErrInfrastructure) || errors.Is(err, ErrSandboxStart) {
		t.Fatalf("Run with the engine down = %v, want ErrInfrastructure and not ErrSandboxStart", err)
	}
	if st := e.PoolStats(); st.Misses != 1 || st.Hits != 0 || st.Idle != 0 {
		t.Fatalf("stats %+v", st)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestPoolFits(t *testing.T) {
	t.Parallel()
	e, err := newWithAPI(Config{WorkerID: "w", Pool: 1}, &fakeDocker{createErr: errors.New("down")})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	def := e.cfg.Defaults
	mod := func(f func(*limits.Limits)) limits.Limits { l := def; f(&l); return l }
	cases := []struct {
		name string
		l    limits.Limits
		fits bool
	}{
		{"defaults", def, true},
		{"other timeout", mod(func(l *limits.Limits) { l.Timeout = limits.Duration(time.Second) }), true},
		{"memory", mod(func(l *limits.Limits) { l.Memory *= 2 }), false},
		{"cpus", mod(func(l *limits.Limits) { l.CPUs = 0.5 }), false},
		{"pids", mod(func(l *limits.Limits) { l.Pids++ }), false},
		{"network", mod(func(l *limits.Limits) { l.Network = &limits.Network{Open: true} }), false},
		{"output", mod(func(l *limits.Limits) { l.Output++ }), false},
		{"tmpfs", mod(func(l *limits.Limits) { l.Tmpfs *= 2 }), false},
	}
	for _, tc := range cases {
		if got := e.pool.fits(tc.l); got != tc.fits {
			t.Errorf("%s: fits = %v, want %v", tc.name, got, tc.fits)
		}
	}
}

func TestPoolConfig(t *testing.T) {
	t.Parallel()
	if _, err := newWithAPI(Config{Pool: -1}, &fakeDocker{}); err == nil {
		t.Fatal("Pool -1 accepted")
	}
	e, err := newWithAPI(Config{WorkerID: "w"}, &fakeDocker{})
	if err != nil {
		t.Fatal(err)
	}
	if e.pool != nil || e.PoolStats() != (PoolStats{}) {
		t.Fatal("Pool 0 made a pool")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

// A launcher that ends both streams with its trailer, OOM count included,
// gets its verdict without the container's exit: this fake container never
// exits on its own.
func TestRunEndsOnTheTrailer(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		exit   int
		ooms   int64
		status jobs.Status
	}{
		{"succeeded", 0, 0, jobs.StatusSucceeded},
		{"failed", 3, 0, jobs.StatusFailed},
		{"oom", 137, 1, jobs.StatusOOM},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeDocker{behave: func(killed <-chan struct{}, stdin io.Reader, stdout, stderr io.Writer) int64 {
				h, err := envelope.Decode(stdin)
				if err != nil {
					return 125
				}
				out, errs := &framed{w: stdout, kind: envelope.FrameStdout}, &framed{w: stdout, kind: envelope.FrameStderr}
				io.WriteString(out, "partial line without newline")
				io.WriteString(errs, "err\n")
				tr := h.Seal().Sign(envelope.Trailer{Exit: tc.exit, CgroupOOMKills: &tc.ooms, StdoutBytes: out.n, StderrBytes: errs.n})
				stdout.Write(envelope.AppendFrame(nil, envelope.FrameTrailer, tr))
				<-killed // the engine's slow teardown, never reached
				return 137
			}}
			e, err := newWithAPI(Config{WorkerID: "w"}, f)
			if err != nil {
				t.Fatal(err)
			}
			res, err := e.Run(context.Background(), &jobs.Job{ID: "j", Image: "python", Code: "x"}, jobrun.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.status || res.Stdout != "partial line without newline" || res.Stderr != "err\n" {
				t.Fatalf("status %s stdout %q stderr %q", res.Status, res.Stdout, res.Stderr)
			}
			f.ContainerKill(context.Background(), "", client.ContainerKillOptions{}) // end the fake
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if slices.Contains(f.calls, "inspect") || f.removed != 1 {
				t.Fatalf("calls %v removed %d: want no inspect and one removal", f.calls, f.removed)
			}
		})
	}
}

// The pool's target doubles on each miss and grows by one when a job
// drains it, up to PoolMax; after poolCalm without either it shrinks by
// one a sweep, handing back the oldest idle sandbox beyond the target.
func TestPoolSizesItself(t *testing.T) {
	t.Parallel()
	e := &Executor{cfg: Config{PoolMaxAge: time.Hour}}
	p := &pool{e: e, size: 2, max: 7, images: []string{"img"}, kick: make(chan struct{}, 1),
		idle: map[string][]*sandbox{}, launching: map[string]int{},
		target: map[string]int{"img": 2}, pressed: map[string]time.Time{}, filled: map[string]bool{}}
	// Still filling at start: a miss is no pressure.
	if s := p.take("img"); s != nil || p.target["img"] != 2 {
		t.Fatalf("a miss before the first fill grew the target to %d", p.target["img"])
	}
	p.filled["img"] = true
	for _, want := range []int{4, 7, 7} {
		if s := p.take("img"); s != nil {
			t.Fatal("a sandbox from an empty pool")
		}
		if got := p.target["img"]; got != want {
			t.Fatalf("target after a miss = %d, want %d", got, want)
		}
	}
	if p.take("other") != nil || len(p.target) != 1 {
		t.Fatalf("an image the pool does not keep got a target: %v", p.target)
	}
	if got := (&Executor{pool: p}).PoolStats(); got.Size != 7 || got.Max != 7 || got.Misses != 5 {
		t.Fatalf("stats %+v", got)
	}

	live := func() *sandbox {
		return &sandbox{born: time.Now(), copyDone: make(chan struct{})} // copyDone open: alive
	}
	p.target["img"] = 4
	p.idle["img"] = []*sandbox{live()}
	if p.take("img") == nil || p.target["img"] != 5 {
		t.Fatalf("a drained pool: target %d, want 5", p.target["img"])
	}

	// Calm: one step a sweep, the oldest idle sandbox first out.
	oldest, newer := live(), live()
	p.idle["img"] = []*sandbox{oldest, newer, live(), live(), live()}
	if out := p.shrink(); len(out) != 0 || p.target["img"] != 5 {
		t.Fatalf("shrank under pressure: %d out, target %d", len(out), p.target["img"])
	}
	p.pressed["img"] = time.Now().Add(-2 * poolCalm)
	out := p.shrink()
	if p.target["img"] != 4 || len(out) != 1 || out[0] != oldest || len(p.idle["img"]) != 4 {
		t.Fatalf("first calm sweep: target %d, %d out, %d idle", p.target["img"], len(out), len(p.idle["img"]))
	}
	for range 5 {
		p.shrink()
	}
	if p.target["img"] != 2 || len(p.idle["img"]) != 2 {
		t.Fatalf("after calm sweeps: target %d, %d idle; want the floor, 2", p.target["img"], len(p.idle["img"]))
	}
}

// A job that finds the pool empty waits for a launch in flight that no
// other job waits for, and gets what it makes; without one, or when its
// context ends, it goes its own way (a fresh container), and a sandbox
// handed over too late goes back to the pool.
func TestPoolAwait(t *testing.T) {
	t.Parallel()
	p := &pool{e: &Executor{}, size: 2, max: 2, images: []string{"img"}, kick: make(chan struct{}, 1),
		idle: map[string][]*sandbox{}, launching: map[string]int{}, waiters: map[string][]chan *sandbox{},
		target: map[string]int{"img": 2}, pressed: map[string]time.Time{}, filled: map[string]bool{}}
	if s := p.await(context.Background(), "img"); s != nil {
		t.Fatal("waited with no launch in flight")
	}
	p.launching["img"] = 1
	got := make(chan *sandbox)
	go func() { got <- p.await(context.Background(), "img") }()
	testutil.Eventually(t, 5*time.Second, "a waiter", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.waiters["img"]) == 1
	})
	// One launch, one waiter: a second job does not wait for it too.
	if s := p.await(context.Background(), "img"); s != nil {
		t.Fatal("two jobs waited for one launch")
	}
	made := &sandbox{born: time.Now(), copyDone: make(chan struct{})}
	p.mu.Lock()
	handed := p.handOver("img", made)
	p.mu.Unlock()
	if s := <-got; !handed || s != made || s.pool != p || p.stats.Waited != 1 {
		t.Fatalf("handed %v, got %p (want %p), waited %d", handed, s, made, p.stats.Waited)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { got <- p.await(ctx, "img") }()
	testutil.Eventually(t, 5*time.Second, "a waiter", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.waiters["img"]) == 1
	})
	cancel()
	if s := <-got; s != nil || len(p.waiters["img"]) != 0 {
		t.Fatalf("canceled waiter: got %v, %d waiters left", s, len(p.waiters["img"]))
	}
	// A launch that fails hands its waiter nil: the job launches its own.
	go func() { got <- p.await(context.Background(), "img") }()
	testutil.Eventually(t, 5*time.Second, "a waiter", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.waiters["img"]) == 1
	})
	p.mu.Lock()
	p.handOver("img", nil)
	p.mu.Unlock()
	if s := <-got; s != nil {
		t.Fatal("a failed launch handed a sandbox")
	}
}

// An optional image's pool starts empty and is kept from its first job on.
func TestPoolOptionalImageOnDemand(t *testing.T) {
	t.Parallel()
	e := &Executor{cfg: Config{PoolMaxAge: time.Hour, Pool: 2, PoolMax: 8}, optional: map[string]bool{"langs": true}}
	p := &pool{e: e, size: 2, max: 8, images: []string{"img", "langs"}, kick: make(chan struct{}, 1),
		idle: map[string][]*sandbox{}, launching: map[string]int{}, waiters: map[string][]chan *sandbox{},
		target: map[string]int{}, pressed: map[string]time.Time{}, filled: map[string]bool{}}
	p.initTargets()
	if p.target["langs"] != 0 || p.target["img"] != 2 {
		t.Fatalf("targets at start %v", p.target)
	}
	if p.take("langs") != nil || p.target["langs"] != 2 {
		t.Fatalf("after the first langs job: target %d, want 2", p.target["langs"])
	}
	if p.take("langs"); p.target["langs"] != 4 {
		t.Fatalf("after a second miss: target %d, want 4", p.target["langs"])
	}
}
