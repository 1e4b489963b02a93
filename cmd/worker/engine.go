package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/sandfleet/sandfleet/internal/retry"
	"github.com/sandfleet/sandfleet/pkg/executor"
	"github.com/sandfleet/sandfleet/pkg/worker"
)

// dockerExecutor adapts pkg/executor to the worker. Check is its Ping: the
// engine answers, the images are there and a sandbox starts with the
// configured runtime; the worker takes no job before it passed, and
// reports why until then. Start-up does not wait on the engine: the reaper
// of what a crashed predecessor with the same ID left behind runs in the
// background (startReaping), retrying until the engine lists its
// containers. Reaping concurrently with jobs is safe: Reap spares this
// process's containers.
type dockerExecutor struct {
	*executor.Executor
	stopReaping context.CancelFunc // nil when not reaping
	reaping     sync.WaitGroup
}

var _ worker.Pinger = (*dockerExecutor)(nil)

func (d *dockerExecutor) Ping(ctx context.Context) error { return d.Check(ctx) }

// startReaping starts the reaper; Close stops and waits for it.
func (d *dockerExecutor) startReaping() {
	ctx, cancel := context.WithCancel(context.Background())
	d.stopReaping = cancel
	d.reaping.Go(func() { d.reap(ctx) })
}

// reap calls Reap until it could list the leftovers. A leftover it cannot
// remove is logged once by Reap and skipped: it is not retried in a loop.
func (d *dockerExecutor) reap(ctx context.Context) {
	b := retry.Policy{Initial: time.Second, Max: 30 * time.Second}.New()
	_ = backoff.RetryNotify(func() error {
		n, err := d.Reap(ctx)
		if n > 0 {
			slog.Info("reaped leftover sandboxes", "count", n)
		}
		return err
	}, backoff.WithContext(b, ctx), func(err error, retry time.Duration) {
		slog.Warn("reap leftover sandboxes; retrying", "err", err, "retry_in", retry.Round(time.Millisecond))
	})
}

// Close stops the reaper, then closes the executor.
func (d *dockerExecutor) Close() error {
	if d.stopReaping != nil {
		d.stopReaping()
		d.reaping.Wait()
	}
	return d.Executor.Close()
}
