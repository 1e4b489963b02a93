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
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
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

// (i) ------------------------------------------------------------------------

func (p *perf2) seedVsDockerRun(ctx context.Context, o options) error {
	rg, err := newRig(ctx, o, "seed")
	if err != nil {
		return err
	}
	defer rg.close()
	seed, err := rg.seed()
	if err != nil {
		return err
	}
	dr, err := rg.dockerRun()
	if err != nil {
		return err
	}
	// Warm-up of both: the image's layers in the page cache.
	if err := seed.run(ctx, o.code); err != nil {
		return err
	}
	if err := dr.run(ctx, o.code); err != nil {
		return err
	}
	return alternate(o.n, []func() error{
		timed(&p.seqSeed, func() error { return seed.run(ctx, o.code) }),
		timed(&p.seqDocker, func() error { return dr.run(ctx, o.code) }),
	}, 0)
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

// (j) ------------------------------------------------------------------------

func (p *perf2) agentLike(ctx context.Context, o options) error {
	rg, err := newRig(ctx, o, "agent")
	if err != nil {
		return err
	}
	defer rg.close()
	// The worker's defaults: --slots = cores, --pool = slots.
	w, err := rg.worker("agent")
	if err != nil {
		return err
	}
	seed, err := rg.seed()
	if err != nil {
		return err
	}
	dr, err := rg.dockerRun()
	if err != nil {
		return err
	}
	fleet := func() error {
		res, err := submitWait(ctx, w, &jobs.Job{Image: "python", Code: o.code})
		if err != nil {
			return err
		}
		if res.DurationMS != nil {
			p.agentSandbox = append(p.agentSandbox, time.Duration(*res.DurationMS)*time.Millisecond)
		}
		if res.CPUMS != nil {
			p.agentCPU = append(p.agentCPU, time.Duration(*res.CPUMS)*time.Millisecond)
		}
		return nil
	}
	if err := fleet(); err != nil {
		return err
	}
	time.Sleep(3 * time.Second) // the pool fills: an agent's first call comes to a warm worker
	return alternate(o.n, []func() error{
		timed(&p.agentFleet, fleet),
		timed(&p.agentSeed, func() error { return seed.run(ctx, o.code) }),
		timed(&p.agentDocker, func() error { return dr.run(ctx, o.code) }),
	}, o.think)
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

// (k) ------------------------------------------------------------------------

func (p *perf2) throughput(ctx context.Context, o options) error {
	rg, err := newRig(ctx, o, "tput")
	if err != nil {
		return err
	}
	defer rg.close()
	conc := fmt.Sprint(o.conc)
	fresh, err := rg.worker("tput-fresh", "--slots", conc, "--pool", "0")
	if err != nil {
		return err
	}
	pooled, err := rg.worker("tput-pooled", "--slots", conc, "--pool", conc)
	if err != nil {
		return err
	}
	ceil, err := rg.ceiling()
	if err != nil {
		return err
	}
	seed, err := rg.seed()
	if err != nil {
		return err
	}
	dr, err := rg.dockerRun()
	if err != nil {
		return err
	}
	for _, w := range []*workerProc{fresh, pooled} {
		if _, err := submitWait(ctx, w, &jobs.Job{Image: "python", Code: o.code}); err != nil {
			return err
		}
	}
	type way struct {
		name string
		run  func(n int) error
	}
	par := func(f func() error) func(int) error {
		return func(n int) error { _, err := parallel(n, o.conc, f); return err }
	}
	ways := []way{
		{"engine ceiling: /bin/true, hardened", par(func() error { _, err := ceil.run(ctx); return err })},
		{fmt.Sprintf("sandfleet --pool 0 --slots %d", o.conc), func(n int) error { return burst(ctx, fresh, n, o.code) }},
		{fmt.Sprintf("sandfleet --pool %d --slots %d", o.conc, o.conc), func(n int) error { return burst(ctx, pooled, n, o.code) }},
		{"docker run --rm", par(func() error { return dr.run(ctx, o.code) })},
		{"the seed's sequence", par(func() error { return seed.run(ctx, o.code) })},
	}
	p.tput = make([]contender, len(ways))
	for i, w := range ways {
		p.tput[i].name = w.name
	}
	const rounds = 2
	for r := range rounds {
		n := o.perf2Jobs / rounds
		for k := range ways {
			i := (k + r*2) % len(ways)  // each round in another order
			time.Sleep(2 * time.Second) // the pooled worker's pool refills; the engine settles
			t := time.Now()
			if err := ways[i].run(n); err != nil {
				return fmt.Errorf("%s: %w", ways[i].name, err)
			}
			p.tput[i].wall += time.Since(t)
			p.tput[i].jobs += n
		}
	}
	return nil
}

// burst submits n jobs at once to w and waits for every result, collected
// on one reply subject as an orchestrator would.
func burst(ctx context.Context, w *workerProc, n int, code string) error {
	reply := fmt.Sprintf("bench.burst.%s.%d", w.id, rand.Int64())
	sub, err := w.nc.SubscribeSync(reply)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	for range n {
		if _, err := w.cli.Submit(ctx, &jobs.Job{Image: "python", Code: code, ReplyTo: reply}); err != nil {
			return w.fail(err)
		}
	}
	for range n {
		msg, err := sub.NextMsg(2 * time.Minute)
		if err != nil {
			return w.fail(fmt.Errorf("waiting for results: %w", err))
		}
		res, err := jobs.DecodeResult(msg.Data)
		if err != nil {
			return err
		}
		if res.Status != jobs.StatusSucceeded {
			return w.fail(fmt.Errorf("job %s: %s %s", res.ID, res.Status, res.Error))
		}
	}
	return nil
}

// (l) ------------------------------------------------------------------------

// churn is the engine's cost of one hardened container that runs
// /bin/true: each step's wall time, and the engine's CPU per container.
type churn struct {
	create, start, wait, remove []time.Duration
	total                       []time.Duration
	shimCPU                     time.Duration // per container: its shim and runc, which serve it alone
	daemonCPU                   time.Duration // per container: dockerd and containerd, others' work included
	idleCPU                     time.Duration // the daemons' CPU per second with nothing of ours running
}

func (p *perf2) engineChurn(ctx context.Context, o options) error {
	rg, err := newRig(ctx, o, "churn")
	if err != nil {
		return err
	}
	defer rg.close()
	ceil, err := rg.ceiling()
	if err != nil {
		return err
	}
	if _, err := ceil.run(ctx); err != nil { // warm-up
		return err
	}
	eng := startEngineMeter(ceil.ours)
	defer eng.stop()
	// What the daemons burn meanwhile for others (this machine's other
	// work uses the same engine), to read the daemons' figure against.
	idle0, t0 := eng.daemonCPU(), time.Now()
	time.Sleep(2 * time.Second)
	p.churn.idleCPU = time.Duration(float64(eng.daemonCPU()-idle0) / time.Since(t0).Seconds())
	d0, s0 := eng.daemonCPU(), eng.shimCPU()
	for range o.perf2Churn {
		s, err := ceil.run(ctx)
		if err != nil {
			return err
		}
		c := &p.churn
		c.create, c.start, c.wait, c.remove = append(c.create, s.create), append(c.start, s.start), append(c.wait, s.wait), append(c.remove, s.remove)
		c.total = append(c.total, s.create+s.start+s.wait+s.remove)
	}
	eng.scan()
	p.churn.daemonCPU = (eng.daemonCPU() - d0) / time.Duration(o.perf2Churn)
	p.churn.shimCPU = (eng.shimCPU() - s0) / time.Duration(o.perf2Churn)
	return nil
}

// (m) ------------------------------------------------------------------------

// levers are what the candidate levers could at most remove from a warm
// job, measured inside the sandbox (the result's duration_ms: hand-off to
// verdict) on one warm worker, alternating.
type levers struct {
	python []time.Duration // python3 main.py with "pass"
	shell  []time.Duration // sh main.sh with "true": the launcher and attach alone
	wallPy []time.Duration // submit → result of the python job

	// (m'): the same warm print(1) on -image and on -lever-base
	base                       string
	withWall, withoutWall      []time.Duration
	withSandbox, withoutSandbx []time.Duration
}

func (p *perf2) leverCosts(ctx context.Context, o options) error {
	rg, err := newRig(ctx, o, "levers")
	if err != nil {
		return err
	}
	defer rg.close()
	w, err := rg.worker("levers", "--slots", "1", "--pool", "2")
	if err != nil {
		return err
	}
	inSandbox := func(d *[]time.Duration, wall *[]time.Duration, j *jobs.Job) func() error {
		return func() error {
			t := time.Now()
			res, err := submitWait(ctx, w, j)
			if err != nil {
				return err
			}
			if wall != nil {
				*wall = append(*wall, time.Since(t))
			}
			if res.DurationMS == nil {
				return errors.New("no duration_ms")
			}
			*d = append(*d, time.Duration(*res.DurationMS)*time.Millisecond)
			return nil
		}
	}
	if _, err := submitWait(ctx, w, &jobs.Job{Image: "python", Code: "pass"}); err != nil {
		return err
	}
	time.Sleep(3 * time.Second)
	if err := alternate(o.n, []func() error{
		inSandbox(&p.levers.python, &p.levers.wallPy, &jobs.Job{Image: "python", Code: "pass"}),
		inSandbox(&p.levers.shell, nil, &jobs.Job{Image: "shell", Code: "true"}),
	}, o.think); err != nil {
		return err
	}
	if o.leverBase == "" {
		return nil
	}
	// (m'): the lever on and off, one warm worker each, alternating.
	b, err := rg.workerOn(o.leverBase, "lever-base", "--slots", "1", "--pool", "2")
	if err != nil {
		return err
	}
	if _, err := submitWait(ctx, b, &jobs.Job{Image: "python", Code: "pass"}); err != nil {
		return err
	}
	time.Sleep(3 * time.Second)
	p.levers.base = o.leverBase
	l := &p.levers
	on, off := w, b
	one := func(w *workerProc, wall, sb *[]time.Duration) func() error {
		return func() error {
			t := time.Now()
			res, err := submitWait(ctx, w, &jobs.Job{Image: "python", Code: o.code})
			if err != nil {
				return err
			}
			*wall = append(*wall, time.Since(t))
			if res.DurationMS != nil {
				*sb = append(*sb, time.Duration(*res.DurationMS)*time.Millisecond)
			}
			return nil
		}
	}
	return alternate(o.n, []func() error{
		one(on, &l.withWall, &l.withSandbox),
		one(off, &l.withoutWall, &l.withoutSandbx),
	}, o.think)
}

// engine meter ---------------------------------------------------------------

// engineMeter adds up the CPU of the Docker engine's processes: dockerd
// and containerd (their reaped children included), and every shim, which
// lives as long as its container (runc's CPU is the shim's children's),
// sampled every 20 ms: a shim's last few milliseconds before it exits are
// missed, so the figure is a lower bound.
type engineMeter struct {
	daemons []int
	ours    func(containerID string) bool
	mine    map[int]bool          // per shim pid: does it serve one of ours
	shims   map[int]time.Duration // the last CPU seen per shim
	spent   atomic.Int64          // shims' CPU so far, ns
	stopC   chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex // one scan at a time: the ticker's, or a caller's last one
}

// startEngineMeter counts the shims of the containers ours says are ours:
// other work on this machine uses the same engine.
func startEngineMeter(ours func(containerID string) bool) *engineMeter {
	m := &engineMeter{ours: ours, mine: map[int]bool{}, shims: map[int]time.Duration{}, stopC: make(chan struct{})}
	for _, pid := range pids() {
		switch comm(pid) {
		case "dockerd", "containerd":
			m.daemons = append(m.daemons, pid)
		}
	}
	m.scan()
	m.wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-m.stopC:
				return
			case <-tick.C:
				m.scan()
			}
		}
	})
	return m
}

func (m *engineMeter) scan() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, pid := range pids() {
		if !strings.HasPrefix(comm(pid), "containerd-shim") {
			continue
		}
		mine, known := m.mine[pid]
		if !known {
			mine = m.ours(shimID(pid))
			m.mine[pid] = mine
		}
		if !mine {
			continue
		}
		c := procCPUAll(pid)
		last, seen := m.shims[pid]
		if !seen {
			last = 0
		}
		if c > last {
			m.spent.Add(int64(c - last))
			m.shims[pid] = c
		}
	}
}

// shimCPU is what the shims of our containers spent so far.
func (m *engineMeter) shimCPU() time.Duration { return time.Duration(m.spent.Load()) }

// daemonCPU is what dockerd and containerd spent so far, for everyone.
func (m *engineMeter) daemonCPU() time.Duration {
	var t time.Duration
	for _, pid := range m.daemons {
		t += procCPUAll(pid)
	}
	return t
}

func (m *engineMeter) stop() {
	close(m.stopC)
	m.wg.Wait()
}

func pids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// shimID is the container a shim serves: its -id argument.
func shimID(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	args := strings.Split(string(b), "\x00")
	for i, a := range args {
		if a == "-id" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// procCPUAll is a process's user and system CPU with its reaped
// children's.
func procCPUAll(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(data), ") ")
	f := strings.Fields(rest)
	if len(f) < 15 {
		return 0
	}
	var sum int64
	for _, i := range []int{11, 12, 13, 14} { // utime, stime, cutime, cstime
		var v int64
		fmt.Sscanf(f[i], "%d", &v)
		sum += v
	}
	return time.Duration(sum) * 10 * time.Millisecond
}

// report ---------------------------------------------------------------------

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func (p *perf2) print(w io.Writer) {
	if p == nil {
		return
	}
	fmt.Fprintf(w, "\nPerformance II: phases (i)-(n), %s, load average %s at start, %s at end\n",
		p.took.Round(time.Second), p.load[0], p.load[1])
	fmt.Fprintf(w, "%-52s %10s %10s\n", "", "p50", "p95")
	row := func(name string, d []time.Duration) {
		if len(d) > 0 {
			fmt.Fprintf(w, "%-52s %10s %10s\n", name, ms(pct(d, .5)), ms(pct(d, .95)))
		}
	}
	row("(i)  the seed's sequence, Engine API, sequential", p.seqSeed)
	row("(i)  docker run --rm, hardened, sequential", p.seqDocker)
	row(fmt.Sprintf("(j)  sandfleet, default pool, %s think", p.o.think), p.agentFleet)
	row("     of which in the sandbox (duration_ms)", p.agentSandbox)
	row("     the job's own CPU (cpu_ms)", p.agentCPU)
	row(fmt.Sprintf("(j)  the seed's sequence, %s think", p.o.think), p.agentSeed)
	row(fmt.Sprintf("(j)  docker run --rm, %s think", p.o.think), p.agentDocker)
	if len(p.tput) > 0 {
		fmt.Fprintf(w, "(k)  %d at once, %d jobs each, in 2 rounds          %21s\n", p.o.conc, p.tput[0].jobs, "throughput")
		for _, c := range p.tput {
			fmt.Fprintf(w, "     %-47s %10.2f jobs/s\n", c.name, c.rate())
		}
	}
	if c := p.churn; len(c.total) > 0 {
		fmt.Fprintf(w, "(l)  engine churn per container, /bin/true, %d sequential: p50 create %s, start %s, wait %s, remove %s; total %s\n",
			len(c.total), ms(pct(c.create, .5)), ms(pct(c.start, .5)), ms(pct(c.wait, .5)), ms(pct(c.remove, .5)), ms(pct(c.total, .5)))
		fmt.Fprintf(w, "     engine CPU per container: its shim and runc %.0f ms (at least); dockerd and containerd %.0f ms, of which others' work (%.0f ms/s before) is part\n",
			msf(c.shimCPU), msf(c.daemonCPU), msf(c.idleCPU))
	}
	if l := p.levers; len(l.python) > 0 {
		py, sh := pct(l.python, .5), pct(l.shell, .5)
		fmt.Fprintf(w, "(m)  in a warm sandbox, hand-off → verdict p50: python3 \"pass\" %s, sh \"true\" %s; submit → result of the python job %s\n",
			ms(py), ms(sh), ms(pct(l.wallPy, .5)))
		fmt.Fprintf(w, "     the interpreter's start: %s (what starting python3 before the job could remove); attach, launcher and exec: %s\n",
			ms(py-sh), ms(sh))
	}
	if l := p.levers; len(l.withWall) > 0 {
		fmt.Fprintf(w, "(m') warm print(1), %d each, alternating: -image submit → result p50 %s (in the sandbox %s), -lever-base %s: %s (%s)\n",
			len(l.withWall), ms(pct(l.withWall, .5)), ms(pct(l.withSandbox, .5)), l.base, ms(pct(l.withoutWall, .5)), ms(pct(l.withoutSandbx, .5)))
	}
	p.pool.print(w)
	p.he.print(w, p.heSkip)
	for _, e := range p.errs {
		fmt.Fprintf(w, "FAILED %s\n", e)
	}

	fmt.Fprintf(w, "\n%-46s %-12s %-12s %-9s %-10s %s\n", "target (Performance II)", "baseline", "sandfleet", "ratio", "goal", "")
	line := func(name, base, got string, x float64, goal string, met bool, judged bool) {
		v := ""
		if judged {
			v = "MISSED"
			if met {
				v = "met"
			}
		}
		fmt.Fprintf(w, "%-46s %-12s %-12s %-9s %-10s %s\n", name, base, got, fmt.Sprintf("%.2f×", x), goal, v)
	}
	absent := func(name, why string) { fmt.Fprintf(w, "%-46s %s\n", name, why) }
	p50 := func(d []time.Duration) time.Duration { return pct(d, .5) }
	if len(p.seqSeed) > 0 {
		x := ratio(p50(p.seqSeed), p50(p.seqDocker))
		line("(i) seed's sequence / docker run --rm, p50", ms(p50(p.seqDocker)), ms(p50(p.seqSeed)), x, "(info)", false, false)
	}
	if len(p.agentFleet) > 0 {
		x := ratio(p50(p.agentFleet), p50(p.agentSeed))
		line("(j) agent-like p50 / the seed's sequence", ms(p50(p.agentSeed)), ms(p50(p.agentFleet)), x, "≤ 0.25×", x <= 0.25, true)
		y := ratio(p50(p.agentFleet), p50(p.agentDocker))
		line("(j) agent-like p50 / docker run --rm", ms(p50(p.agentDocker)), ms(p50(p.agentFleet)), y, "(info)", false, false)
	}
	if l := p.levers; len(l.withWall) > 0 {
		x := ratio(pct(l.withWall, .5), pct(l.withoutWall, .5))
		line("(m') the lever: p50 with / without", ms(pct(l.withoutWall, .5)), ms(pct(l.withWall, .5)), x, "(info)", false, false)
	}
	if ps := p.pool; ps != nil && len(ps.seqS) > 0 {
		line(fmt.Sprintf("(m'') back-to-back p95, pool %d / pool %d", ps.big, ps.small), ms(pct(ps.seqS, .95)), ms(pct(ps.seqB, .95)),
			ratio(pct(ps.seqB, .95), pct(ps.seqS, .95)), "(info)", false, false)
		if len(p.seqDocker) > 0 && len(ps.seqA) > 0 {
			// The same sequential jobs as (b)/(a), in bursts after the first:
			// the self-sizing pool against docker run --rm of (i).
			x := ratio(pct(ps.seqA, .5), pct(p.seqDocker, .5))
			line("(m'') back-to-back p50, self-sizing / (i) docker run", ms(pct(p.seqDocker, .5)), ms(pct(ps.seqA, .5)), x, "≤ 0.20×", x <= 0.2, true)
			y := ratio(pct(ps.seqA, .95), pct(p.seqDocker, .95))
			line("(m'') back-to-back p95, self-sizing / (i) docker run", ms(pct(p.seqDocker, .95)), ms(pct(ps.seqA, .95)), y, "≤ 0.50×", y <= 0.5, true)
		}
	}
	if r := p.reportR; r != nil && len(r.docker.seq) > 0 && len(r.pooled.seq) > 0 {
		x := ratio(pct(r.pooled.seq, .5), pct(r.docker.seq, .5))
		line("(b)/(a) back-to-back p50", ms(pct(r.docker.seq, .5)), ms(pct(r.pooled.seq, .5)), x, "≤ 0.20×", x <= 0.2, true)
		y := ratio(pct(r.pooled.seq, .95), pct(r.docker.seq, .95))
		line("(b)/(a) back-to-back p95", ms(pct(r.docker.seq, .95)), ms(pct(r.pooled.seq, .95)), y, "≤ 0.50×", y <= 0.5, true)
	} else {
		absent("(b)/(a) back-to-back p50, p95", "not run: (a) and (b) run in the whole bench, not with -perf2-only")
	}
	if len(p.tput) == 5 {
		ceil, fresh, pooled, dr, seed := p.tput[0], p.tput[1], p.tput[2], p.tput[3], p.tput[4]
		js := func(c contender) string { return fmt.Sprintf("%.2f/s", c.rate()) }
		// Every job gets a sandbox of its own either way; the worker's
		// default (the pool) is the one judged, --pool 0 (each job's
		// container launched on its path) is shown beside it.
		x := pooled.rate() / ceil.rate()
		line("(k) fresh sandboxes, default pool / ceiling", js(ceil), js(pooled), x, "≥ 0.90×", x >= 0.9, true)
		line("(k) fresh sandboxes / docker run --rm", js(dr), js(pooled), pooled.rate()/dr.rate(), "(info)", false, false)
		line("(k) fresh sandboxes / the seed's sequence", js(seed), js(pooled), pooled.rate()/seed.rate(), "(info)", false, false)
		line("(k) --pool 0 / engine ceiling", js(ceil), js(fresh), fresh.rate()/ceil.rate(), "(info)", false, false)
	}
	if r := p.reportR; r != nil && r.queue > 0 {
		fmt.Fprintf(w, "%-46s %-12s %-12s %-9s %-10s %s\n", "(c) queue alone, no-op executor", "", fmt.Sprintf("%.0f/s", r.queue), "", "≥ 20000/s", verdictWord(r.queue >= 20000))
	} else {
		absent("(c) queue alone", "not run with -perf2-only")
	}
	if r := p.reportR; r != nil && r.rssIdle > 0 {
		mib := float64(r.rssIdle) / 1024
		fmt.Fprintf(w, "%-46s %-12s %-12s %-9s %-10s %s\n", "(d) worker RSS idle", "", fmt.Sprintf("%.1f MiB", mib), "", "≤ 30 MiB", verdictWord(mib <= 30))
	} else {
		absent("(d) worker RSS idle", "not run with -perf2-only")
	}
	if h := p.he; h != nil {
		x := ratio(h.fleet, h.docker)
		line("(n) HumanEval wall / docker run 4 parallel", ms(h.docker), ms(h.fleet), x, "≤ 0.55×", x <= 0.55, true)
	} else {
		absent("(n) HumanEval", "not run: "+p.heSkip)
	}
}

func verdictWord(met bool) string {
	if met {
		return "met"
	}
	return "MISSED"
}
