// Command soak drives one worker for a long time with a realistic mix of
// work at a fixed arrival rate, samples what the worker holds every
// interval, checks at the end that every job was accounted for once, with
// the status its kind should have, and that nothing was left behind once
// the worker stopped, and judges the run by its criteria (criteria.go):
// it exits non-zero when one is missed.
//
// Usage (make soak; SOAK=5m for a quick look; SOAK_FLAGS for more):
//
//	go run ./tools/soak [-d 60m] [-rate 0.7] [-every 1m] [-out soak-out] [-nats URL] [-egress=false]
//	go run ./tools/soak -memory
//
// It starts bin/worker --embedded (HTTP API, metrics and --pprof on
// loopback) in a temporary directory, or with -nats URL against a
// JetStream that is already there. The jobs are a mix of quick
// (print(1)), slow (a 1 s sleep), memory (a 50 MiB allocation), failing
// (exit 3), timeout (a 1 s limit on a 30 s sleep), canceled (canceled a
// second after its submission), large output (512 KiB), output_limit
// (200 KiB past a 64 KiB cap), workspace steps (a job writes a file into
// a new workspace, the next step reads it) and egress (an HTTP GET
// through the worker's egress proxy of a test server on a Docker network
// of the soak's); a batch of five jobs goes over the HTTP API every
// -batch-every; a session at a time is created, given a file, runs six
// code cells that keep a counter, reads its file back, runs a background
// process and reads its output, runs a command on a terminal, and is
// deleted. Every interval it records the worker's RSS, live heap after
// the last GC (go_gc_heap_live_bytes), goroutines, open fds, its
// containers by state, its egress networks, the data directory's size,
// the streams' bytes and messages, and the p50/p99 of the quick jobs'
// submit→result latency and of the sessions' code cells in that
// interval. It takes a heap profile after the first interval and at the
// end (heap-start.pprof, heap-end.pprof, compare with go tool pprof
// -diff_base) and the goroutines at idle, prints the table and the
// criteria, and writes soak.svg and soak.tsv under -out.
//
// -memory instead measures what the worker holds per live session, per
// warm sandbox and per stored job (memory.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"time"
)

type options struct {
	duration     time.Duration
	every        time.Duration
	rate         float64 // jobs per second
	sessionEvery time.Duration
	batchEvery   time.Duration
	maxInFlight  int
	workerBin    string
	slots        int
	out          string
	natsURL      string // a JetStream to drive the worker against; "" for --embedded
	egress       bool   // egress jobs against a test server on a Docker network of the soak's
	memory       bool   // the memory figures instead of a soak
	storedJobs   int    // with memory: the jobs stored for the per-job figure
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "d", time.Hour, "how long to drive the worker")
	flag.DurationVar(&o.every, "every", time.Minute, "the sampling interval")
	flag.Float64Var(&o.rate, "rate", 0.7, "jobs submitted per second (a fixed arrival rate)")
	flag.DurationVar(&o.sessionEvery, "session-every", 20*time.Second, "a session is started this often (one at a time)")
	flag.IntVar(&o.maxInFlight, "max-in-flight", 64, "jobs waited for at once; an arrival past it is counted as skipped")
	flag.StringVar(&o.workerBin, "worker", "bin/worker", "the worker binary (make build)")
	flag.IntVar(&o.slots, "slots", 2, "the worker's --slots")
	flag.StringVar(&o.out, "out", "soak-out", "the directory of the profiles, the TSV and the SVG")
	flag.DurationVar(&o.batchEvery, "batch-every", time.Minute, "a batch of five quick jobs is sent over the HTTP API this often")
	flag.StringVar(&o.natsURL, "nats", "", "drive a worker started with --nats `URL` (an existing JetStream, with its credentials) instead of --embedded")
	flag.BoolVar(&o.egress, "egress", true, "include egress jobs, against a test HTTP server on a Docker network the soak makes")
	flag.BoolVar(&o.memory, "memory", false, "measure the worker's memory per live session, per warm sandbox and per stored job, instead of a soak")
	flag.IntVar(&o.storedJobs, "stored-jobs", 2000, "with -memory: how many jobs are stored for the per-job figure")
	flag.Parse()
	if d := os.Getenv("SOAK"); d != "" {
		v, err := time.ParseDuration(d)
		if err != nil {
			fmt.Fprintf(os.Stderr, "SOAK=%s: %v\n", d, err)
			os.Exit(2)
		}
		o.duration = v
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.memory {
		return measureMemory(ctx, o)
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	var inet *internet
	if o.egress {
		var err error
		if inet, err = startInternet(ctx); err != nil {
			return fmt.Errorf("the egress test server: %w (-egress=false runs without egress jobs)", err)
		}
		defer inet.stop()
	}
	w, err := startWorker(ctx, o, inet.workerArgs("--pool", "4", "--sessions", "2")...)
	if err != nil {
		return err
	}
	defer w.stop()
	fmt.Printf("soak: worker %s on %s, %s at %.2f jobs/s, a session every %s, a batch every %s, egress %v; load %s\n",
		w.id, w.natsMode(), o.duration, o.rate, o.sessionEvery, o.batchEvery, o.egress, loadAvg())
	l := newLoad(w, o)
	l.prime(ctx)
	base, err := w.settle(ctx, nil)
	if err != nil {
		return err
	}
	base.label = "start"
	base.jobs = l.count()
	fmt.Println(base.line())

	runCtx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	done := make(chan struct{})
	go func() { l.drive(runCtx); close(done) }()

	var samples []sample
	tick := time.NewTicker(o.every)
	defer tick.Stop()
	start := time.Now()
	for loop := true; loop; {
		select {
		case <-tick.C:
		case <-runCtx.Done():
			loop = false
			if len(samples) > 0 && time.Since(start)-samples[len(samples)-1].at < o.every/2 {
				continue // just sampled
			}
		}
		s := w.sample(time.Since(start), l)
		samples = append(samples, s)
		fmt.Println(s.line())
		if len(samples) == 1 {
			_ = w.heapProfile(filepath.Join(o.out, "heap-start.pprof"))
		}
	}
	<-done
	l.wait()
	_ = w.heapProfile(filepath.Join(o.out, "heap-end.pprof"))
	http.DefaultClient.CloseIdleConnections() // the soak's own keep-alive connections are not the worker's
	idle, _ := w.settle(ctx, &base)
	idle.label = "idle"
	idle.jobs = l.count()
	_ = w.profile("goroutine?debug=1", filepath.Join(o.out, "goroutines-idle.txt"))
	samples = append([]sample{base}, samples...)
	samples = append(samples, idle)

	problems := l.check(ctx)
	w.stop()
	problems = append(problems, w.leftovers()...)
	if inet != nil {
		problems = append(problems, inet.stop()...)
	}

	printTable(os.Stdout, samples)
	l.printCounts(os.Stdout)
	if err := writeTSV(filepath.Join(o.out, "soak.tsv"), samples); err != nil {
		return err
	}
	if err := writeSVG(filepath.Join(o.out, "soak.svg"), samples, o); err != nil {
		return err
	}
	fmt.Printf("wrote %s/soak.svg, soak.tsv, heap-start.pprof, heap-end.pprof; load %s\n", o.out, loadAvg())
	for _, p := range problems {
		fmt.Println("PROBLEM:", p)
	}
	crit := criteria(o, samples, len(problems))
	printCriteria(os.Stdout, crit)
	if missed := countMissed(crit); missed > 0 {
		return fmt.Errorf("%d of %d criteria missed", missed, len(crit))
	}
	fmt.Println("every criterion met: every job accounted for with its status, every session kept its state, nothing left behind")
	return nil
}
