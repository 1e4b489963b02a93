package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/internal/natsconn"
	"github.com/sandfleet/sandfleet/internal/procfs"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// (f) ------------------------------------------------------------------------

// streaming is what publishing each job's events (its live output) costs a warm
// job that writes nothing: the same job through two workers, one with
// --events=false, in pairs, so that the machine's load weighs on both
// alike.
type streaming struct {
	n       int
	on, off []time.Duration
	// The same without Docker: an in-process worker per side, each with its
	// own JetStream server, on an executor that sleeps 30 ms (and tells
	// OnStart, as the real one does); what events add to the worker's own
	// path, without the engine's noise.
	queueN            int
	queueOn, queueOff []time.Duration
	// CPU of each worker process per job (its embedded NATS server
	// included), which the machine's load hardly moves.
	cpuOn, cpuOff time.Duration
}

// streamingCost runs phase (f): o.eventsN jobs per worker, each worker
// with --slots 1 --pool 2, in pairs, a pause after each job for the pool
// to refill (a warm job is what is measured).
func streamingCost(ctx context.Context, o options) (*streaming, error) {
	on, err := startWorker(ctx, o, "events-on", "--slots", "1", "--pool", "2")
	if err != nil {
		return nil, err
	}
	defer on.stop()
	off, err := startWorker(ctx, o, "events-off", "--slots", "1", "--pool", "2", "--events=false")
	if err != nil {
		return nil, err
	}
	defer off.stop()
	one := func(w *workerProc) (time.Duration, error) {
		jctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		t := time.Now()
		res, err := w.cli.SubmitAndWait(jctx, &jobs.Job{Image: "python", Code: o.quietCode})
		d := time.Since(t)
		if err != nil {
			return 0, w.fail(err)
		}
		if res.Status != jobs.StatusSucceeded {
			return 0, w.fail(fmt.Errorf("job %s: %s %s %s", res.ID, res.Status, res.Error, res.Stderr))
		}
		return d, nil
	}
	// Warm-up of both, then time for the pools to fill.
	for _, w := range []*workerProc{on, off} {
		if _, err := one(w); err != nil {
			return nil, err
		}
	}
	time.Sleep(3 * time.Second)
	s := &streaming{n: o.eventsN}
	on0, off0 := procfs.CPU(on.cmd.Process.Pid), procfs.CPU(off.cmd.Process.Pid)
	// In pairs, the order turned every other pair (on off, off on, ...),
	// so that what follows a pause, or the other worker, weighs on both.
	for i := range 2 * o.eventsN {
		w, into := on, &s.on
		if i%4 == 1 || i%4 == 2 {
			w, into = off, &s.off
		}
		d, err := one(w)
		if err != nil {
			return nil, err
		}
		*into = append(*into, d)
		time.Sleep(300 * time.Millisecond) // the pool refills
	}
	s.cpuOn = (procfs.CPU(on.cmd.Process.Pid) - on0) / time.Duration(o.eventsN)
	s.cpuOff = (procfs.CPU(off.cmd.Process.Pid) - off0) / time.Duration(o.eventsN)
	return s, queuePath(ctx, s)
}

// sleeper is an executor whose job takes 30 ms and writes nothing.
type sleeper struct{}

func (sleeper) Run(ctx context.Context, j *jobs.Job, opts jobrun.Options) (*jobs.Result, error) {
	start := time.Now().UTC()
	if opts.OnStart != nil {
		opts.OnStart(jobrun.Start{Container: "sleeper", Limits: limits.Default()})
	}
	select {
	case <-time.After(30 * time.Millisecond):
	case <-ctx.Done():
	}
	code, end := 0, time.Now().UTC()
	return &jobs.Result{ID: j.ID, Status: jobs.StatusSucceeded, Exit: &code, StartedAt: &start, FinishedAt: &end}, nil
}

// queuePath measures the 30 ms job through two in-process workers, events
// on and off, in pairs as above.
func queuePath(ctx context.Context, s *streaming) error {
	side := func(noEvents bool) (*jobs.Client, func(), error) {
		srv, stopServer, err := embedded("events")
		if err != nil {
			return nil, nil, err
		}
		nc, js, err := natsconn.JetStream(natsconn.Config{URL: srv.ClientURL(), Name: "sandfleet-bench"})
		if err != nil {
			stopServer()
			return nil, nil, err
		}
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		w, err := worker.New(js, sleeper{}, worker.Config{ID: "bench-events", Slots: 1, Logger: quiet, NoEvents: noEvents, FetchWait: time.Second})
		if err != nil {
			return nil, nil, err
		}
		stop, stopNow := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(stop, context.Background()) }()
		closeAll := func() {
			stopNow()
			<-done
			nc.Close()
			stopServer()
		}
		cli, err := openClient(ctx, js)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		return cli, closeAll, nil
	}
	on, closeOn, err := side(false)
	if err != nil {
		return err
	}
	defer closeOn()
	off, closeOff, err := side(true)
	if err != nil {
		return err
	}
	defer closeOff()
	s.queueN = 200
	for i := range 2*s.queueN + 2 {
		cli, into := on, &s.queueOn
		if i%4 == 1 || i%4 == 2 {
			cli, into = off, &s.queueOff
		}
		jctx, cancel := context.WithTimeout(ctx, time.Minute)
		t := time.Now()
		_, err := cli.SubmitAndWait(jctx, &jobs.Job{Image: "python", Code: "pass"})
		cancel()
		if err != nil {
			return err
		}
		if i >= 2 { // the first pair warms up
			*into = append(*into, time.Since(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func (s *streaming) print(w io.Writer, quietCode string) {
	if s == nil {
		return
	}
	on, off := pct(s.on, .5), pct(s.off, .5)
	ratio := float64(on) / float64(off)
	fmt.Fprintf(w, "\n(f)  streaming on vs off: warm python %q (no output), %d jobs each in pairs, --slots 1 --pool 2\n", quietCode, s.n)
	fmt.Fprintf(w, "%-44s %12s %12s\n", "", "p50", "p95")
	fmt.Fprintf(w, "%-44s %12s %12s\n", "     events on (default)", ms(on), ms(pct(s.on, .95)))
	fmt.Fprintf(w, "%-44s %12s %12s\n", "     --events=false", ms(off), ms(pct(s.off, .95)))
	// Each job with events beside the job without it of the same pair: the
	// median of their differences, which the load's drift weighs on less
	// than on either p50.
	var diffs []time.Duration
	for i := range min(len(s.on), len(s.off)) {
		diffs = append(diffs, s.on[i]-s.off[i])
	}
	fmt.Fprintf(w, "     paired: median of (on − off) over %d pairs: %+.1f ms\n", len(diffs), float64(pct(diffs, .5))/float64(time.Millisecond))
	fmt.Fprintf(w, "     worker process CPU per job (its NATS server included): %.1f ms on, %.1f ms off\n",
		float64(s.cpuOn)/float64(time.Millisecond), float64(s.cpuOff)/float64(time.Millisecond))
	if len(s.queueOn) > 0 {
		var qd []time.Duration
		for i := range min(len(s.queueOn), len(s.queueOff)) {
			qd = append(qd, s.queueOn[i]-s.queueOff[i])
		}
		us := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
		fmt.Fprintf(w, "(f') the same without Docker: a 30 ms job, in-process workers, %d in pairs: p50 %s on, %s off; paired median %+.2f ms\n",
			s.queueN, us(pct(s.queueOn, .5)), us(pct(s.queueOff, .5)), float64(pct(qd, .5))/float64(time.Millisecond))
	}
	v := "MISSED"
	if ratio <= 1.05 {
		v = "met"
	}
	fmt.Fprintf(w, "%-40s %-22s %-22s %s\n", "(f) p50, events on / off", fmt.Sprintf("%.3f×", ratio), "≤ 1.05×", v)
}
