package main

// (u) how cost grows with work, on one worker (bin/worker --embedded with
// its HTTP API, reached as a client would):
//
//	jobs     print(1) over POST /v1/jobs?wait= against concurrent callers
//	         (1, 4, 16, 64), with the worker's defaults: p50, p99, the
//	         rate, and the worker's CPU per job (its embedded NATS server
//	         included);
//	memory   the worker's RSS (/proc) and live heap (go_gc_heap_live_bytes
//	         after a forced GC) against idle sessions (0, 10, 50, 100) and
//	         against the warm pool's size (--pool 0, 4, 16);
//	exec     a session's exec round trip against sessions busy at once on
//	         the worker (1, 4, 16);
//	storage  the JetStream streams' bytes and messages before and after:
//	         what a finished job, a live session and a session call keep
//	         on the broker.
//
// The whole bench runs it after (t); -mode growth runs it alone (make
// bench-growth). It prints the tables and writes growth-jobs.svg,
// growth-memory.svg and growth-exec.svg under -growth-out.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// growthOptions are the flags of (u).
type growthOptions struct {
	callers  string // levels of concurrent job callers
	jobsPer  int    // jobs per level (at least 2 per caller)
	idle     string // levels of idle sessions
	pools    string // levels of --pool
	busy     string // levels of busy sessions
	execsPer int    // execs per busy session per level
	parts    string // which of jobs,memory,pool,exec to run
	out      string // the SVGs' directory
	settle   time.Duration
	growth   bool // run (u) in the whole bench
}

func defineGrowthFlags(fs *flag.FlagSet, o *growthOptions) {
	fs.BoolVar(&o.growth, "growth", true, "run (u), how cost grows with work, in the whole bench")
	fs.StringVar(&o.callers, "growth-callers", "1,4,16,64", "(u): `LEVELS` of concurrent job callers")
	fs.IntVar(&o.jobsPer, "growth-jobs", 40, "(u): jobs per level of callers (at least 2 per caller)")
	fs.StringVar(&o.idle, "growth-sessions", "0,10,50,100", "(u): `LEVELS` of idle sessions the worker's memory is read at")
	fs.StringVar(&o.pools, "growth-pools", "0,4,16", "(u): `LEVELS` of --pool the worker's memory is read at")
	fs.StringVar(&o.busy, "growth-busy", "1,4,16", "(u): `LEVELS` of sessions busy at once for the exec round trip")
	fs.IntVar(&o.execsPer, "growth-execs", 50, "(u): execs per busy session per level")
	fs.StringVar(&o.parts, "growth-parts", "jobs,memory,pool,exec", "(u): what to measure: jobs, memory (idle sessions), pool, exec")
	fs.StringVar(&o.out, "growth-out", "bench-out", "(u): `DIR` of the plots growth-*.svg")
	fs.DurationVar(&o.settle, "growth-settle", 3*time.Second, "(u): the pause before each level, for the pool to refill and the worker to calm")
}

// levels parses a comma-separated list of counts, each 0 or more, in the
// order given.
func levels(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("level %q: want a count, 0 or more", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q: no levels", s)
	}
	return out, nil
}

// latencyLevel is one level's calls: how long each took, and what failed.
type latencyLevel struct {
	level    int
	ok       []time.Duration
	fails    int
	firstErr string
	wall     time.Duration
	cpu      time.Duration // the worker's, over the level
	warm     int           // jobs the pool handed a warm sandbox
	cold     int           // jobs that started a fresh one
}

func (l latencyLevel) rate() float64 {
	if l.wall <= 0 {
		return 0
	}
	return float64(len(l.ok)) / l.wall.Seconds()
}

// memoryLevel is the worker's memory at one level.
type memoryLevel struct {
	level     int
	rss, heap float64 // bytes
}

// storeDelta is what some work left on the broker, stream by stream.
type storeDelta struct {
	what  string
	n     int // jobs, sessions or calls
	bytes map[string]int64
	msgs  map[string]int64
}

// growthFigures is what (u) measured.
type growthFigures struct {
	o        growthOptions
	cores    int
	code     string
	jobs     []latencyLevel
	idle     []memoryLevel
	pools    []memoryLevel
	exec     []latencyLevel
	store    []storeDelta
	plots    []string
	load     [2]string
	took     time.Duration
	jobArgs  string
	sessArgs string
}

// plotFile is one SVG of (u).
type plotFile struct {
	file, title string
	panels      []plotPanel
}

// growthPhase runs (u)'s parts in order.
func growthPhase(ctx context.Context, o options) (*growthFigures, error) {
	g := o.growthOptions
	f := &growthFigures{o: g, cores: runtime.NumCPU(), code: o.code, load: [2]string{loadAvg(), ""}}
	start := time.Now()
	want := func(part string) bool { return slices.Contains(strings.Split(g.parts, ","), part) }
	var err error
	if want("jobs") {
		if err = f.jobsPart(ctx, o); err != nil {
			return nil, fmt.Errorf("jobs: %w", err)
		}
	}
	if want("memory") || want("exec") {
		if err = f.sessionsPart(ctx, o, want("memory"), want("exec")); err != nil {
			return nil, fmt.Errorf("sessions: %w", err)
		}
	}
	if want("pool") {
		if err = f.poolPart(ctx, o); err != nil {
			return nil, fmt.Errorf("pool: %w", err)
		}
	}
	f.load[1], f.took = loadAvg(), time.Since(start)
	return f, f.writePlots()
}

// growthAlone is -mode growth.
func growthAlone(ctx context.Context, o options) error {
	if _, err := os.Stat(o.workerBin); err != nil {
		return fmt.Errorf("-worker %s: %w (make build)", o.workerBin, err)
	}
	f, err := growthPhase(ctx, o)
	if err != nil {
		return fmt.Errorf("(u): %w", err)
	}
	f.print(os.Stdout)
	return nil
}

// writePlots draws what was measured, one SVG a part, under -growth-out.
func (f *growthFigures) writePlots() error {
	plots := f.plotFiles()
	if len(plots) == 0 {
		return nil
	}
	if err := os.MkdirAll(f.o.out, 0o755); err != nil {
		return err
	}
	for _, p := range plots {
		path := filepath.Join(f.o.out, p.file)
		file, err := os.Create(path)
		if err != nil {
			return err
		}
		err = writePlot(file, p.title, p.panels)
		if cerr := file.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		f.plots = append(f.plots, path)
	}
	return nil
}

// plotFiles are the SVGs of the parts that ran.
func (f *growthFigures) plotFiles() []plotFile {
	load1 := func(s string) string { l, _, _ := strings.Cut(s, " "); return l }
	sub := fmt.Sprintf(" (%d cores; 1-min load %s → %s)", f.cores, load1(f.load[0]), load1(f.load[1]))
	var plots []plotFile
	if len(f.jobs) > 0 {
		x := levelNames(f.jobs)
		plots = append(plots, plotFile{"growth-jobs.svg", "sandfleet: a print(1) job over HTTP against concurrent callers, one worker" + sub, []plotPanel{
			{title: "latency, submit → result", xlabel: "concurrent callers", unit: "s", xs: x,
				lines: []plotLine{{"p50", latencies(time.Second, f.jobs, .5)}, {"p99", latencies(time.Second, f.jobs, .99)}}},
			{title: "jobs finished per second", xlabel: "concurrent callers", unit: "jobs/s", xs: x,
				lines: []plotLine{{"rate", rates(f.jobs)}}},
		}})
	}
	var mem []plotPanel
	if len(f.idle) > 0 {
		mem = append(mem, memoryPanel("worker memory against idle sessions", "idle sessions", f.idle))
	}
	if len(f.pools) > 0 {
		mem = append(mem, memoryPanel("worker memory against the warm pool", "--pool (warm sandboxes)", f.pools))
	}
	if len(mem) > 0 {
		plots = append(plots, plotFile{"growth-memory.svg", "sandfleet: one worker's memory" + sub, mem})
	}
	if len(f.exec) > 0 {
		x := levelNames(f.exec)
		plots = append(plots, plotFile{"growth-exec.svg", "sandfleet: a session's exec round trip over HTTP, one worker" + sub, []plotPanel{
			{title: "exec `true`, request → exit code", xlabel: "sessions busy at once", unit: "ms", xs: x,
				lines: []plotLine{{"p50", latencies(time.Millisecond, f.exec, .5)}, {"p99", latencies(time.Millisecond, f.exec, .99)}}},
			{title: "execs answered per second", xlabel: "sessions busy at once", unit: "execs/s", xs: x,
				lines: []plotLine{{"rate", rates(f.exec)}}},
		}})
	}
	return plots
}

// latencies are each level's p-th percentile in units.
func latencies(unit time.Duration, l []latencyLevel, p float64) []float64 {
	v := make([]float64, len(l))
	for i, x := range l {
		v[i] = float64(pct(x.ok, p)) / float64(unit)
	}
	return v
}

func rates(l []latencyLevel) []float64 {
	v := make([]float64, len(l))
	for i, x := range l {
		v[i] = x.rate()
	}
	return v
}

func levelNames(l []latencyLevel) []string {
	v := make([]string, len(l))
	for i, x := range l {
		v[i] = strconv.Itoa(x.level)
	}
	return v
}

// memoryPanel plots RSS and live heap, in MiB, against m's levels.
func memoryPanel(title, xlabel string, m []memoryLevel) plotPanel {
	xs, rss, heap := make([]string, len(m)), make([]float64, len(m)), make([]float64, len(m))
	for i, x := range m {
		xs[i], rss[i], heap[i] = strconv.Itoa(x.level), x.rss/(1<<20), x.heap/(1<<20)
	}
	return plotPanel{title: title, xlabel: xlabel, unit: "MiB", xs: xs, lines: []plotLine{{"RSS", rss}, {"live heap", heap}}}
}
