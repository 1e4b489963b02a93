// Command bench measures sandfleet against plain `docker run --rm` on this
// machine, in one run, and prints the figures beside the targets:
//
//	(a)  docker run --rm of the hardened print(1) job: sequential p50/p95,
//	     and throughput with 2×cores runs in parallel;
//	(b)  the same job through sandfleet (a bin/worker --embedded subprocess
//	     with its warm pool, and the pkg/jobs client): sequential
//	     submit→result p50/p95, and throughput with every job in flight;
//	(b') the same with --pool 0, to show what the pool buys;
//	(c)  queue overhead alone: jobs/s through an in-process JetStream and
//	     the real internal/worker on a no-op executor;
//	(d)  the worker subprocess's RSS idle and under load;
//	(e)  (b) and (b') again with --runtime runsc, when the engine has
//	     gVisor registered (make runsc): what the second kernel costs;
//	(f)  what a workspace's restore and save add to a warm job, for 0 B,
//	     1 MiB and 20 MiB (workspace.go).
//
// Usage (make bench): go run ./tools/bench [-n 20] [-jobs 40] ...
// -cpuprofile writes a CPU profile of phase (c), which runs in this process.
// (q), mcp.go: print(1) over MCP stdio and HTTP beside REST, and each
// code context language's first and next cell; -mcp-only alone.
// (p), egress.go: the egress proxy's cost for a 1 MiB HTTPS download and
// 100 small requests against an open bridge network; -egress-only alone.
//
// Then (f), the cost of streaming each job's live output: a warm job with no output,
// p50 with the worker's events on and off, in pairs, and (f') the same on
// the worker's own path without Docker; -events-only runs them alone; and
// (g), the HTTP gateway against the Go client; and (o), the web
// console's pages over 100,000 finished jobs (-console-only alone).
//
// Phases (i) to (n), Performance II (perf.go): the seed's Engine API
// sequence, agent-like calls, fresh-sandbox throughput against the
// engine's ceiling, the engine's cost per container, the levers and
// HumanEval, with one target table; -perf2-only runs them alone.
//
// (t), tti.go: time to interactive in the field's format, jobs and
// sessions, sequential, staggered and burst, against docker in the same
// run; -mode tti runs it alone (make bench-tti).
//
// (u), growth.go: how cost grows with work: job latency against callers,
// memory against idle sessions and the pool, exec against busy sessions,
// broker storage per job and call; -mode growth alone (make bench-growth).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/sandfleet/sandfleet/internal/egressnet"
	"github.com/sandfleet/sandfleet/internal/executor"
)

type options struct {
	n            int
	jobs         int
	parallel     int
	slots        int
	pool         int
	queueJobs    int
	queueSlots   int
	workerBin    string
	cpuProfile   string
	skipDocker   bool
	code         string
	runsc        string // auto, on or off
	runtime      string // the worker's --runtime for (b); "" for its default
	egressImage  string
	egressRounds int
	egressTrials int
	egress       bool
	egressOnly   bool
	httpJobs     int
	httpClients  int
	quietCode    string
	eventsN      int
	eventsOnly   bool

	perf2Options  // (i)-(n), perf.go
	ttiOptions    // (t), tti.go
	growthOptions // (u), growth.go
	mode          string
	mcpOptions    // (q), mcp.go

	// (o), console.go
	consoleJobs  int
	consoleViews int
	consoleOnly  bool
	sessionsOnly bool

	// (h), workspace.go
	image          string
	workspaces     bool
	workspacesOnly bool
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	o := options{}
	cores := runtime.NumCPU()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 20, "sequential runs per latency figure")
	fs.IntVar(&o.jobs, "jobs", 40, "jobs per throughput figure")
	fs.IntVar(&o.parallel, "parallel", 2*cores, "docker run processes at once for (a)'s throughput")
	fs.IntVar(&o.slots, "slots", 0, "the worker's --slots for (b) (default -parallel: the same concurrency as (a))")
	fs.IntVar(&o.pool, "pool", -1, "the worker's --pool for (b) (default --slots)")
	fs.IntVar(&o.queueJobs, "queue-jobs", 20000, "jobs for (c)")
	fs.IntVar(&o.queueSlots, "queue-slots", 256, "worker slots for (c)")
	fs.StringVar(&o.workerBin, "worker", "bin/worker", "the worker binary for (b) and (d)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of (c) to `FILE`")
	fs.BoolVar(&o.skipDocker, "skip-docker", false, "run (c) only")
	fs.StringVar(&o.code, "code", "print(1)", "the Python job")
	fs.IntVar(&o.httpJobs, "http-jobs", 2000, "no-op jobs each way for (g)")
	fs.IntVar(&o.httpClients, "http-clients", 64, "concurrent callers for (g)")
	fs.StringVar(&o.runsc, "runsc", "auto", "measure (e) under gVisor: auto (when the engine has runsc), on or off")
	fs.StringVar(&o.quietCode, "quiet-code", "pass", "the Python job of (f), which writes nothing")
	fs.IntVar(&o.eventsN, "events-n", 30, "jobs per worker for (f)")
	fs.BoolVar(&o.eventsOnly, "events-only", false, "run (f) only")
	fs.StringVar(&o.image, "image", "", "the sandbox `IMAGE` of (a), (b), (h) and (i)-(n) (default the worker's, "+executor.DefaultImage+")")
	fs.BoolVar(&o.workspaces, "workspaces", true, "run (h), the workspace phase")
	fs.BoolVar(&o.workspacesOnly, "workspaces-only", false, "run (h) alone")
	fs.IntVar(&o.consoleJobs, "console-jobs", 100_000, "finished jobs the console's pages are timed over in (o)")
	fs.IntVar(&o.consoleViews, "console-views", 20, "views of each page in (o)")
	fs.BoolVar(&o.consoleOnly, "console-only", false, "run (o), the console's pages, alone")
	fs.BoolVar(&o.sessionsOnly, "sessions-only", false, "run (s), sessions' time to interactive and round trips, alone")
	fs.StringVar(&o.egressImage, "egress-image", "", "the egress proxy's `IMAGE` for (p) (default "+egressnet.DefaultImage+")")
	fs.IntVar(&o.egressRounds, "egress-rounds", 5, "rounds of (p) per container: a 1 MiB download and 100 small requests each")
	fs.IntVar(&o.egressTrials, "egress-trials", 3, "containers each way for (p), interleaved")
	fs.BoolVar(&o.egress, "egress", true, "run (p), the egress proxy against an open bridge network")
	fs.BoolVar(&o.egressOnly, "egress-only", false, "run (p) alone")
	definePerf2Flags(fs, &o.perf2Options)
	defineTTIFlags(fs, &o.ttiOptions)
	defineGrowthFlags(fs, &o.growthOptions)
	fs.StringVar(&o.mode, "mode", "", "run one phase alone: tti, time to interactive in the field's format (tti.go); growth, how cost grows with work (growth.go)")
	defineMCPFlags(fs, &o.mcpOptions)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.slots <= 0 {
		o.slots = o.parallel
	}
	if o.pool < 0 {
		o.pool = o.slots
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx := context.Background()
	switch o.mode {
	case "":
	case "tti":
		return ttiAlone(ctx, o)
	case "growth":
		return growthAlone(ctx, o)
	default:
		return fmt.Errorf("-mode %q: want tti or growth", o.mode)
	}
	if o.workspacesOnly {
		return workspacesAlone(ctx, o)
	}
	if o.perf2Only {
		p2 := runPerf2(ctx, o)
		p2.print(os.Stdout)
		return p2.err()
	}
	if o.egressOnly {
		load0, start := loadAvg(), time.Now()
		step("(p) egress: %d trials each way of a 1 MiB HTTPS download and 100 small requests, %d rounds", o.egressTrials, o.egressRounds)
		f, err := egressPhase(ctx, o)
		if err != nil {
			return fmt.Errorf("(p): %w", err)
		}
		fmt.Printf("\nsandfleet bench: %d cores, load average %s at start, %s at end, %s in all\n",
			cores, load0, loadAvg(), time.Since(start).Round(time.Second))
		f.print(os.Stdout)
		return nil
	}
	if o.mcpOnly {
		step("(q) MCP stdio and HTTP beside REST: %d jobs each; (q') %d fresh contexts a language", o.n, o.ctxRounds)
		f, err := mcpPhase(ctx, o)
		if err != nil {
			return fmt.Errorf("(q): %w", err)
		}
		f.print(os.Stdout)
		return nil
	}
	if o.sessionsOnly {
		step("(s) sessions: %d creates and %d calls, and the same by hand with docker", o.n, 5*o.n)
		f, err := sessionsPhase(ctx, o)
		if err != nil {
			return fmt.Errorf("(s): %w", err)
		}
		f.print(os.Stdout)
		return nil
	}
	if o.consoleOnly {
		load0, start := loadAvg(), time.Now()
		step("(o) the console over %d finished jobs, %d views of each page", o.consoleJobs, o.consoleViews)
		f, err := consoleLists(ctx, o)
		if err != nil {
			return fmt.Errorf("(o): %w", err)
		}
		fmt.Printf("\nsandfleet bench: %d cores, load average %s at start, %s at end, %s in all\n",
			cores, load0, loadAvg(), time.Since(start).Round(time.Second))
		f.print(os.Stdout)
		return nil
	}
	load0 := loadAvg()
	start := time.Now()
	r := &report{cores: cores, o: o}
	if o.eventsOnly {
		step("(f) streaming on vs off: %d warm jobs each, in pairs", o.eventsN)
		s, err := streamingCost(ctx, o)
		if err != nil {
			return fmt.Errorf("(f): %w", err)
		}
		fmt.Printf("\nsandfleet bench: %d cores, load average %s at start, %s at end, %s in all\n",
			cores, load0, loadAvg(), time.Since(start).Round(time.Second))
		s.print(os.Stdout, o.quietCode)
		return nil
	}

	var p2 *perf2
	var events *streaming
	var sess *sessionFigures
	var egr *egressFigures
	var tti *ttiFigures
	var mcpf *mcpFigures
	var growth *growthFigures
	if !o.skipDocker {
		if _, err := os.Stat(o.workerBin); err != nil {
			return fmt.Errorf("-worker %s: %w (make build)", o.workerBin, err)
		}
		step("(a) docker run --rm: %d sequential, %d in %d parallel", o.n, o.jobs, o.parallel)
		if err := dockerRun(ctx, o, r); err != nil {
			return fmt.Errorf("(a): %w", err)
		}
		step("(b) sandfleet with --pool %d --slots %d", o.pool, o.slots)
		if err := viaWorker(ctx, o, o.pool, &r.pooled, true, r); err != nil {
			return fmt.Errorf("(b): %w", err)
		}
		step("(b') sandfleet with --pool 0 --slots %d", o.slots)
		if err := viaWorker(ctx, o, 0, &r.fresh, false, r); err != nil {
			return fmt.Errorf("(b'): %w", err)
		}
		if o.runsc == "on" || (o.runsc == "auto" && hasRuntime(ctx, "runsc")) {
			gv := o
			gv.runtime = "runsc"
			step("(e) sandfleet under runsc, --pool %d and --pool 0", o.pool)
			if err := viaWorker(ctx, gv, o.pool, &r.runscPooled, false, r); err != nil {
				return fmt.Errorf("(e): %w", err)
			}
			if err := viaWorker(ctx, gv, 0, &r.runscFresh, false, r); err != nil {
				return fmt.Errorf("(e): %w", err)
			}
		}
		step("(f) streaming on vs off: %d warm jobs each, in pairs", o.eventsN)
		var err error
		if events, err = streamingCost(ctx, o); err != nil {
			return fmt.Errorf("(f): %w", err)
		}
		if o.workspaces {
			step("(h) workspaces of 0 B, 1 MiB and 20 MiB: %d steps each, interleaved with plain jobs", o.n)
			var err error
			if r.ws, err = workspaceCost(ctx, o); err != nil {
				return fmt.Errorf("(h): %w", err)
			}
		}
		step("(s) sessions: %d creates and %d calls, and the same by hand with docker", o.n, 5*o.n)
		if sess, err = sessionsPhase(ctx, o); err != nil {
			return fmt.Errorf("(s): %w", err)
		}
		if o.mcp {
			step("(q) MCP stdio and HTTP beside REST: %d jobs each; (q') %d fresh contexts a language", o.n, o.ctxRounds)
			if mcpf, err = mcpPhase(ctx, o); err != nil {
				return fmt.Errorf("(q): %w", err)
			}
		}
		if o.egress {
			step("(p) egress: %d trials each way of a 1 MiB HTTPS download and 100 small requests, %d rounds", o.egressTrials, o.egressRounds)
			if egr, err = egressPhase(ctx, o); err != nil {
				return fmt.Errorf("(p): %w", err)
			}
		}
		if o.perf2 {
			p2 = runPerf2(ctx, o)
		}
		step("(t) time to interactive: %d per mode and contender", o.ttiN)
		if tti, err = ttiPhase(ctx, o); err != nil {
			return fmt.Errorf("(t): %w", err)
		}
		if o.growth {
			step("(u) how cost grows: %s callers, %s idle sessions, --pool %s, %s busy sessions", o.callers, o.idle, o.pools, o.busy)
			if growth, err = growthPhase(ctx, o); err != nil {
				return fmt.Errorf("(u): %w", err)
			}
		}
	}
	step("(c) queue overhead: %d jobs, no-op executor, %d slots", o.queueJobs, o.queueSlots)
	if err := queueOverhead(ctx, o, r); err != nil {
		return fmt.Errorf("(c): %w", err)
	}
	step("(g) HTTP gateway: %d no-op jobs each way, %d concurrent callers", o.httpJobs, o.httpClients)
	if err := gatewayOverhead(ctx, o, r); err != nil {
		return fmt.Errorf("(g): %w", err)
	}
	step("(o) the console over %d finished jobs, %d views of each page", o.consoleJobs, o.consoleViews)
	cons, err := consoleLists(ctx, o)
	if err != nil {
		return fmt.Errorf("(o): %w", err)
	}
	r.load = [2]string{load0, loadAvg()}
	r.took = time.Since(start)
	r.print(os.Stdout)
	events.print(os.Stdout, o.quietCode)
	sess.print(os.Stdout)
	egr.print(os.Stdout)
	mcpf.print(os.Stdout)
	cons.print(os.Stdout)
	tti.print(os.Stdout)
	growth.print(os.Stdout)
	if p2 != nil {
		p2.reportR = r
		p2.print(os.Stdout)
		return p2.err()
	}
	return nil
}

func step(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// figures of one way of running the job.
type figures struct {
	seq  []time.Duration
	tput float64 // jobs/s
}

type report struct {
	cores             int
	o                 options
	docker, pooled    figures
	fresh             figures
	runscPooled       figures // (e)
	runscFresh        figures
	queue             float64
	queueCPU          time.Duration // per job: server, worker and client together
	rssIdle, rssLoad  int64         // KiB
	rssAnon           int64         // KiB of rssIdle that is the process's own (not the binary's pages)
	hwm               int64
	viaGo, viaGoReply gatewayFigures // (g)
	viaHTTP           gatewayFigures
	ws                *wsFigures // (h)
	load              [2]string
	took              time.Duration
}

// report ---------------------------------------------------------------------

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p*float64(len(s)-1) + 0.5)
	return s[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "\nsandfleet bench: %d cores, load average %s at start, %s at end, %s in all\n",
		r.cores, r.load[0], r.load[1], r.took.Round(time.Second))
	fmt.Fprintf(w, "job: python %q; latency over %d sequential runs; throughput over %d jobs\n\n", r.o.code, r.o.n, r.o.jobs)
	tw := func(cols ...string) { fmt.Fprintf(w, "%-44s %12s %12s %14s\n", cols[0], cols[1], cols[2], cols[3]) }
	tw("", "p50", "p95", "throughput")
	row := func(name string, f figures) {
		if len(f.seq) == 0 {
			return
		}
		tw(name, ms(pct(f.seq, .5)), ms(pct(f.seq, .95)), fmt.Sprintf("%.2f jobs/s", f.tput))
	}
	row(fmt.Sprintf("(a)  docker run --rm (%d parallel)", r.o.parallel), r.docker)
	row(fmt.Sprintf("(b)  sandfleet, --pool %d --slots %d", r.o.pool, r.o.slots), r.pooled)
	row(fmt.Sprintf("(b') sandfleet, --pool 0 --slots %d", r.o.slots), r.fresh)
	row(fmt.Sprintf("(e)  runsc, --pool %d --slots %d", r.o.pool, r.o.slots), r.runscPooled)
	row(fmt.Sprintf("(e') runsc, --pool 0 --slots %d", r.o.slots), r.runscFresh)
	tw(fmt.Sprintf("(c)  queue only, no-op executor, %d slots", r.o.queueSlots), "", "", fmt.Sprintf("%.0f jobs/s", r.queue))
	fmt.Fprintf(w, "     (c) costs %.0f µs of CPU per job, NATS server, worker and client together: at most %.0f jobs/s per core\n",
		float64(r.queueCPU)/float64(time.Microsecond), float64(time.Second)/float64(max(r.queueCPU, 1)))
	r.printGateway(w)
	if r.rssIdle > 0 {
		fmt.Fprintf(w, "(d)  worker RSS: %.1f MiB idle (%.1f MiB its own memory, the rest the binary's code and data pages, shared and clean), %.1f MiB peak under load (VmHWM %.1f MiB)\n",
			float64(r.rssIdle)/1024, float64(r.rssAnon)/1024, float64(r.rssLoad)/1024, float64(r.hwm)/1024)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-40s %-22s %-22s %s\n", "target", "measured", "goal (aim)", "")
	verdict := func(name, measured, goal string, met, aim bool) {
		v := "MISSED"
		if met {
			v = "met"
		}
		if aim {
			v += ", aim met"
		}
		fmt.Fprintf(w, "%-40s %-22s %-22s %s\n", name, measured, goal, v)
	}
	if len(r.docker.seq) > 0 {
		lat := float64(pct(r.pooled.seq, .5)) / float64(pct(r.docker.seq, .5))
		verdict("(b)/(a) p50 latency", fmt.Sprintf("%.2f×", lat), "≤ 0.50× (0.25×)", lat <= 0.5, lat <= 0.25)
		tp := r.pooled.tput / r.docker.tput
		verdict("(b)/(a) throughput", fmt.Sprintf("%.2f×", tp), "≥ 1.00× (1.20×)", tp >= 1, tp >= 1.2)
		fl := float64(pct(r.fresh.seq, .5)) / float64(pct(r.docker.seq, .5))
		ft := r.fresh.tput / r.docker.tput
		fmt.Fprintf(w, "%-40s %-22s %-22s %s\n", "(b')/(a), no pool: p50, throughput", fmt.Sprintf("%.2f×, %.2f×", fl, ft), "(for comparison)", "")
	}
	if len(r.runscPooled.seq) > 0 && len(r.pooled.seq) > 0 {
		wl := float64(pct(r.runscPooled.seq, .5)) / float64(pct(r.pooled.seq, .5))
		cl := float64(pct(r.runscFresh.seq, .5)) / float64(pct(r.fresh.seq, .5))
		fmt.Fprintf(w, "%-40s %-22s %-22s %s\n", "(e)/(b) runsc cost: warm p50, cold p50", fmt.Sprintf("%.2f×, %.2f×", wl, cl), "(for comparison)", "")
	}
	const goal = 3000.0 // on 2 cores
	verdict("(c) queue throughput", fmt.Sprintf("%.0f jobs/s", r.queue), fmt.Sprintf("≥ %.0f jobs/s", goal), r.queue >= goal, false)
	if r.rssIdle > 0 {
		mib := float64(r.rssIdle) / 1024
		verdict("(d) worker RSS idle", fmt.Sprintf("%.1f MiB", mib), "≤ 50 MiB", mib <= 50, false)
	}
	r.ws.print(w)
}
