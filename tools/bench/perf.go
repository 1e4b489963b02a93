package main

// Performance II: phases (i) to (n), run after the others, or alone with
// -perf2-only. Every comparison is measured side by side in the same run
// (alternating jobs, or rounds whose order turns), so that the machine's
// load weighs on both sides alike, and reported as a ratio:
//
//	(i)  the seed's way (seed.go): one container per job through the
//	     Engine API, create, start, wait, logs, remove, with the seed's
//	     limits, against `docker run --rm`, sequential, alternating;
//	(j)  agent-like calls: one job at a time and 0.3 s of think time after
//	     each, sandfleet (its default pool) against the seed's sequence and
//	     `docker run --rm`, alternating;
//	(k)  throughput of fresh sandboxes: the engine's own ceiling (create,
//	     start, wait, remove of /bin/true with the sandbox's hardening, 4 in
//	     parallel) against sandfleet --pool 0 --slots 4 and --pool 4
//	     --slots 4, `docker run --rm` and the seed's sequence, 4 at once, in
//	     rounds;
//	(l)  the engine's cost per container: each step's wall time and the
//	     engine's CPU (dockerd, containerd and the shims);
//	(m)  the levers: what the interpreter's start and the attach round
//	     trip take inside a warm sandbox;
//	(n)  HumanEval's canonical solutions through `submit batch` against
//	     hardened `docker run` 4 in parallel, when the dataset is there.

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// perf2Options are the flags of phases (i) to (n).
type perf2Options struct {
	perf2      bool
	perf2Only  bool
	think      time.Duration
	conc       int    // (k), (n): containers or jobs at once
	humaneval  string // (n): the dataset, or "off"
	submitBin  string
	perf2Jobs  int    // (k): jobs per contender
	perf2Churn int    // (l): sequential containers
	leverBase  string // (m'): an image without the lever, beside -image's
}

// defaultHumanEval is where CI keeps the dataset: beside the checkout.
const defaultHumanEval = "../shared/data/humaneval/HumanEval.jsonl.gz"

func definePerf2Flags(fs *flag.FlagSet, o *perf2Options) {
	fs.BoolVar(&o.perf2, "perf2", true, "run phases (i)-(n), Performance II")
	fs.BoolVar(&o.perf2Only, "perf2-only", false, "run phases (i)-(n) alone")
	fs.DurationVar(&o.think, "think", 300*time.Millisecond, "(j), (h): the agent's think time between jobs")
	fs.IntVar(&o.conc, "perf2-parallel", 4, "(k), (n): containers or jobs at once")
	fs.IntVar(&o.perf2Jobs, "perf2-jobs", 40, "(k): jobs per contender")
	fs.IntVar(&o.perf2Churn, "churn-n", 20, "(l): sequential containers")
	fs.StringVar(&o.humaneval, "humaneval", defaultHumanEval, "(n): HumanEval.jsonl.gz, or off")
	fs.StringVar(&o.submitBin, "submit", "bin/submit", "(n): the submit binary")
	fs.StringVar(&o.leverBase, "lever-base", "", "(m'): a sandbox `IMAGE` without the lever under test (e.g. SANDFLEET_PRESTART=off), run beside -image's, alternating")
}

// perf2 is what phases (i) to (n) measured.
type perf2 struct {
	o perf2Options
	n int

	seqSeed, seqDocker []time.Duration // (i)

	agentFleet, agentSeed, agentDocker []time.Duration // (j): submit → result, or the whole call
	agentSandbox                       []time.Duration // (j): the fleet's duration_ms, hand-off → verdict
	agentCPU                           []time.Duration // (j): the job's own CPU (cpu_ms)

	tput    []contender // (k), in the order printed
	churn   churn       // (l)
	levers  levers      // (m)
	pool    *poolSizing // (m'')
	he      *heFigures  // (n); nil when skipped
	heSkip  string
	took    time.Duration
	load    [2]string
	errs    []string // phases that failed: the run goes on without them
	reportR *report  // the older phases' figures, when they ran
}

// contender is one way of running jobs 4 at once in (k).
type contender struct {
	name string
	jobs int
	wall time.Duration
}

func (c contender) rate() float64 {
	if c.wall <= 0 {
		return 0
	}
	return float64(c.jobs) / c.wall.Seconds()
}

// runPerf2 runs phases (i) to (n). A phase that fails is reported as such
// and the others still run: one run prints every target it could measure.
func runPerf2(ctx context.Context, o options) *perf2 {
	p := &perf2{o: o.perf2Options, n: o.n}
	start, load0 := time.Now(), loadAvg()
	try := func(name string, f func() error) {
		if err := f(); err != nil {
			p.errs = append(p.errs, fmt.Sprintf("%s: %v", name, err))
			step("%s FAILED: %v", name, err)
		}
	}
	step("(i) the seed's sequence (Engine API) vs docker run --rm: %d each, alternating", o.n)
	try("(i)", func() error { return p.seedVsDockerRun(ctx, o) })
	step("(j) agent-like calls, %s think time: sandfleet, the seed's sequence, docker run --rm, %d each, alternating", o.think, o.n)
	try("(j)", func() error { return p.agentLike(ctx, o) })
	step("(k) fresh-sandbox throughput, %d at once, %d jobs per contender, in rounds", o.conc, o.perf2Jobs)
	try("(k)", func() error { return p.throughput(ctx, o) })
	step("(l) the engine's cost per container: %d sequential /bin/true", o.perf2Churn)
	try("(l)", func() error { return p.engineChurn(ctx, o) })
	step("(m) levers: the interpreter's start and the attach round trip in a warm sandbox, %d each", o.n)
	try("(m)", func() error { return p.leverCosts(ctx, o) })
	step("(m'') the pool's size for back-to-back jobs: fixed --pool %d and %d, self-sizing %d to %d, blocks of %d, rotating", o.conc, 4*o.conc, o.conc, 4*o.conc, o.n)
	try("(m'')", func() error { return p.poolSize(ctx, o) })
	try("(n)", func() error { return p.humanEval(ctx, o) })
	p.took, p.load = time.Since(start), [2]string{load0, loadAvg()}
	return p
}

// err says which phases failed, after the report printed what the others
// measured.
func (p *perf2) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	return fmt.Errorf("phases (i)-(n): %d failed: %s", len(p.errs), strings.Join(p.errs, "; "))
}

// timed appends each call's wall time to d.
func timed(d *[]time.Duration, f func() error) func() error {
	return func() error {
		t := time.Now()
		if err := f(); err != nil {
			return err
		}
		*d = append(*d, time.Since(t))
		return nil
	}
}

// alternate runs n rounds of every side, the order turned by one each
// round, with pause after every call.
func alternate(n int, sides []func() error, pause time.Duration) error {
	for i := range n {
		for k := range sides {
			if err := sides[(i+k)%len(sides)](); err != nil {
				return err
			}
			time.Sleep(pause)
		}
	}
	return nil
}

// submitWait runs one job through w and wants it to succeed.
func submitWait(ctx context.Context, w *workerProc, j *jobs.Job) (*jobs.Result, error) {
	jctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	res, err := w.cli.SubmitAndWait(jctx, j)
	if err != nil {
		return nil, w.fail(err)
	}
	if res.Status != jobs.StatusSucceeded {
		return nil, w.fail(fmt.Errorf("job %s: %s %s %s", res.ID, res.Status, res.Error, res.Stderr))
	}
	return res, nil
}
