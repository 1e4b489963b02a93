package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/internal/natsconn"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// (c) the queue alone: an in-process JetStream and worker on a no-op
// executor.

// noop succeeds at once: what is left is the queue.
type noop struct{}

func (noop) Run(_ context.Context, j *jobs.Job, _ jobrun.Options) (*jobs.Result, error) {
	code := 0
	now := time.Now().UTC()
	return &jobs.Result{ID: j.ID, Status: jobs.StatusSucceeded, Exit: &code, Labels: j.Labels, StartedAt: &now, FinishedAt: &now}, nil
}

func queueOverhead(ctx context.Context, o options, r *report) error {
	srv, stopServer, err := embedded("queue")
	if err != nil {
		return err
	}
	defer stopServer()
	nc, js, err := natsconn.JetStream(natsconn.Config{URL: srv.ClientURL(), Name: "sandfleet-bench"})
	if err != nil {
		return err
	}
	defer nc.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := worker.New(js, noop{}, worker.Config{ID: "bench-queue", Slots: o.queueSlots, Logger: quiet})
	if err != nil {
		return err
	}
	stop, stopNow := context.WithCancel(ctx)
	force, forceNow := context.WithCancel(ctx)
	defer forceNow()
	done := make(chan error, 1)
	go func() { done <- w.Run(stop, force) }()
	defer func() {
		stopNow()
		<-done
	}()
	// The client has a connection of its own, as it would in a fleet.
	cnc, cjs, err := natsconn.JetStream(natsconn.Config{URL: srv.ClientURL(), Name: "sandfleet-bench"})
	if err != nil {
		return err
	}
	defer cnc.Close()
	cli, err := openClient(ctx, cjs)
	if err != nil {
		return err
	}
	if o.cpuProfile != "" {
		pf, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	const reply = "bench.queue.replies"
	var got atomic.Int64
	all := make(chan struct{})
	sub, err := cnc.Subscribe(reply, func(*nats.Msg) {
		if got.Add(1) == int64(o.queueJobs) {
			close(all)
		}
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	t, cpu0 := time.Now(), cpuTime()
	// Submitters publish asynchronously-enough: several goroutines, each
	// waiting for its publish acks, as many orchestrators would.
	_, err = parallel(o.queueJobs, 32, func() error {
		_, err := cli.Submit(ctx, &jobs.Job{Image: "python", Code: "print(1)", ReplyTo: reply})
		return err
	})
	if err != nil {
		return err
	}
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("only %d of %d results", got.Load(), o.queueJobs)
	}
	r.queue = float64(o.queueJobs) / time.Since(t).Seconds()
	r.queueCPU = (cpuTime() - cpu0) / time.Duration(o.queueJobs)
	return nil
}

// cpuTime is this process's user+system CPU time: unlike wall-clock
// figures, per-job CPU barely moves when other work loads the machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
