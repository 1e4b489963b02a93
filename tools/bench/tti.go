package main

// (t) time to interactive in the field's format (the ComputeSDK
// benchmark's methodology): create → the first command's result, in three
// modes, N sandboxes each, reported as min, median, p95, p99 and success
// rate:
//
//	sequential  N one after another;
//	staggered   N started 200 ms apart, whatever is still running;
//	burst       N at once.
//
// For one-shot jobs (POST /v1/jobs?wait= of print(1) → its result) and for
// sessions (POST /v1/sessions, then the first exec; the session is deleted
// after the clock stops), through a worker's HTTP API as a client would,
// on one worker with its defaults (--embedded, --slots = cores, --pool =
// slots, --sessions 16). The baselines are the same hardened container by
// hand in the same run and mode: `docker run --rm` for a job, `docker run
// -d` + `docker exec` for a session. -mode tti runs it alone (make
// bench-tti); -tti-worker-b adds a second worker binary's jobs beside
// -worker's, to tell two builds apart in one run.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"
)

// ttiOptions are the flags of (t).
type ttiOptions struct {
	ttiN    int
	gap     time.Duration // staggered: between starts
	kinds   string        // jobs,sessions
	workerB string        // a second worker binary for jobs, beside -worker's
	argsA   string        // extra flags of -worker's worker (e.g. --metrics ADDR --pprof)
	argsB   string        // extra flags of -tti-worker-b's
	settle  time.Duration // between blocks: the pool refills, the engine calms
}

func defineTTIFlags(fs *flag.FlagSet, o *ttiOptions) {
	fs.IntVar(&o.ttiN, "tti-n", 100, "(t): sandboxes per mode and contender (the field's 100; 20 for a quick look)")
	fs.DurationVar(&o.gap, "tti-gap", 200*time.Millisecond, "(t): the staggered mode's interval between starts")
	fs.StringVar(&o.kinds, "tti-kinds", "jobs,sessions", "(t): what to measure: jobs, sessions or both")
	fs.StringVar(&o.workerB, "tti-worker-b", "", "(t): a second worker `BINARY` whose jobs run beside -worker's, alternating (another build)")
	fs.StringVar(&o.argsA, "tti-args", "", "(t): extra `FLAGS` of -worker's worker, space-separated (e.g. --metrics 127.0.0.1:9191 --pprof)")
	fs.StringVar(&o.argsB, "tti-args-b", "", "(t): extra `FLAGS` of -tti-worker-b's worker")
	fs.DurationVar(&o.settle, "tti-settle", 3*time.Second, "(t): the pause before each block, for the pool to refill")
}

// ttiModes in the order run and printed.
var ttiModes = []string{"sequential", "staggered", "burst"}

// ttiSide is one contender: do readies one sandbox and runs the first
// command; the clock stops when it returns, then after (when not nil)
// cleans up untimed.
type ttiSide struct {
	name string
	do   func(ctx context.Context) (after func(), err error)
}

// ttiSeries is one side's outcomes in one mode.
type ttiSeries struct {
	side, mode string
	ok         []time.Duration
	failed     []time.Duration // how long a failed call took to fail
	fails      int
	firstErr   string
	wall       time.Duration // from the first start to the last end, summed over blocks
}

func (s *ttiSeries) tries() int { return len(s.ok) + s.fails }

func (s *ttiSeries) success() float64 {
	if s.tries() == 0 {
		return 0
	}
	return float64(len(s.ok)) / float64(s.tries())
}

// ttiKind is one kind's figures: every side in every mode.
type ttiKind struct {
	name   string // jobs or sessions
	series map[string][]*ttiSeries
}

func (k *ttiKind) get(mode, side string) *ttiSeries {
	for _, s := range k.series[mode] {
		if s.side == side {
			return s
		}
	}
	return nil
}

// ttiFigures is what (t) measured.
type ttiFigures struct {
	o          ttiOptions
	n          int
	cores      int
	workerArgs string
	kinds      []*ttiKind
	ceil       *ceiling
	ceilRate   float64 // the engine's ceiling, containers/s, 4 at once
	ceilN      int
	ceilTook   time.Duration
	load       [2]string
	took       time.Duration
}

// drive runs n calls of side in mode and records them in s.
func drive(ctx context.Context, mode string, n int, gap time.Duration, side ttiSide, s *ttiSeries) {
	var mu sync.Mutex
	one := func() {
		t := time.Now()
		after, err := side.do(ctx)
		d := time.Since(t)
		mu.Lock()
		if err != nil {
			s.fails++
			s.failed = append(s.failed, d)
			if s.firstErr == "" {
				s.firstErr = firstLine(err.Error())
			}
		} else {
			s.ok = append(s.ok, d)
		}
		mu.Unlock()
		if after != nil {
			after()
		}
	}
	start := time.Now()
	defer func() { s.wall += time.Since(start) }()
	if mode == "sequential" {
		for range n {
			one()
		}
		return
	}
	if mode == "burst" {
		gap = 0
	}
	var wg sync.WaitGroup
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * gap)); d > 0 {
			time.Sleep(d)
		}
		wg.Go(one)
	}
	wg.Wait()
}

// measure runs every mode for sides: sequential and staggered in two
// halves, the sides' order turned for the second (ABBA), so that a drift
// in the machine's load weighs on both; burst once each, N at once.
func measure(ctx context.Context, o ttiOptions, kind string, n int, sides []ttiSide) *ttiKind {
	k := &ttiKind{name: kind, series: map[string][]*ttiSeries{}}
	for _, side := range sides { // warm-up: the image's layers, the connections
		if after, err := side.do(ctx); err == nil && after != nil {
			after()
		}
	}
	for _, mode := range ttiModes {
		for _, side := range sides {
			k.series[mode] = append(k.series[mode], &ttiSeries{side: side.name, mode: mode})
		}
		blocks := [][2]int{{n / 2, 0}, {n - n/2, 1}}
		if mode == "burst" {
			blocks = [][2]int{{n, 0}}
		}
		for _, b := range blocks {
			for i := range sides {
				j := i
				if b[1] == 1 {
					j = len(sides) - 1 - i
				}
				step("(t) %s, %s: %s, %d", kind, mode, sides[j].name, b[0])
				time.Sleep(o.settle)
				drive(ctx, mode, b[0], o.gap, sides[j], k.series[mode][j])
			}
		}
	}
	return k
}

// ttiPhase runs (t).
func ttiPhase(ctx context.Context, o options) (*ttiFigures, error) {
	f := &ttiFigures{o: o.ttiOptions, n: o.ttiN, cores: runtime.NumCPU(), load: [2]string{loadAvg(), ""}}
	start := time.Now()
	rg, err := newRig(ctx, o, "tti")
	if err != nil {
		return nil, err
	}
	defer rg.close()
	a, err := startHTTPWorker(ctx, rg, o.workerBin, "tti", o.argsA)
	if err != nil {
		return nil, err
	}
	f.workerArgs = strings.TrimSpace("--embedded " + o.argsA)
	var b *httpWorker
	if o.workerB != "" {
		if b, err = startHTTPWorker(ctx, rg, o.workerB, "tti-b", o.argsB); err != nil {
			return nil, err
		}
	}
	if strings.Contains(o.kinds, "jobs") {
		dr, err := rg.dockerRun()
		if err != nil {
			return nil, err
		}
		sides := []ttiSide{{"sandfleet", a.job(o.code)}}
		if b != nil {
			sides[0].name = "sandfleet (A: " + o.workerBin + ")"
			sides = append(sides, ttiSide{"sandfleet (B: " + o.workerB + ")", b.job(o.code)})
		}
		sides = append(sides, ttiSide{"docker run --rm", func(ctx context.Context) (func(), error) {
			return nil, dr.run(ctx, o.code)
		}})
		// The engine's ceiling before and after: the machine's load drifts.
		if err := f.engineCeiling(ctx, rg); err != nil {
			return nil, err
		}
		f.kinds = append(f.kinds, measure(ctx, o.ttiOptions, "jobs", o.ttiN, sides))
		if err := f.engineCeiling(ctx, rg); err != nil {
			return nil, err
		}
	}
	if strings.Contains(o.kinds, "sessions") {
		ds, err := newDockerSession(ctx, o.image)
		if err != nil {
			return nil, err
		}
		defer ds.close()
		f.kinds = append(f.kinds, measure(ctx, o.ttiOptions, "sessions", o.ttiN, []ttiSide{
			{"sandfleet", a.session},
			{"docker run -d + docker exec", ds.ready},
		}))
	}
	f.load[1], f.took = loadAvg(), time.Since(start)
	return f, nil
}

// engineCeiling measures the engine's own ceiling in the same run: a
// hardened /bin/true created, started, waited for and removed, 4 at once.
// Called twice, it keeps both runs' containers over their time.
func (f *ttiFigures) engineCeiling(ctx context.Context, rg *rig) error {
	if f.ceil == nil {
		c, err := rg.ceiling()
		if err != nil {
			return err
		}
		f.ceil = c
	}
	c, n := f.ceil, min(f.n, 40)
	step("(t) the engine's ceiling: %d containers, 4 at once", n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	t := time.Now()
	for range 4 {
		wg.Go(func() {
			for range next {
				if _, err := c.run(ctx); err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	f.ceilN += n
	f.ceilTook += time.Since(t)
	f.ceilRate = float64(f.ceilN) / f.ceilTook.Seconds()
	return nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

// ttiAlone is -mode tti.
func ttiAlone(ctx context.Context, o options) error {
	if _, err := os.Stat(o.workerBin); err != nil {
		return fmt.Errorf("-worker %s: %w (make build)", o.workerBin, err)
	}
	f, err := ttiPhase(ctx, o)
	if err != nil {
		return fmt.Errorf("(t): %w", err)
	}
	f.print(os.Stdout)
	return nil
}
