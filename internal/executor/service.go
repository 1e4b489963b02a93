package executor

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/sandfleet/sandfleet/internal/retry"
)

// Service is an Executor as a worker runs it. Ping is Check: the engine
// answers, the images are there and a sandbox starts with the configured
// runtime; a worker takes no job before it passed, and reports why until
// then. Start-up does not wait on the engine: the reaper of what a crashed
// predecessor with the same worker ID left behind runs in the background
// (StartService), retrying until the engine lists its containers, then
// looking again every reapEvery and once more at Close. Reaping
// concurrently with jobs is safe: Reap spares this Executor's containers.
//
// A Service made without StartService (&Service{Executor: e}) pings and
// does not reap.
type Service struct {
	*Executor
	stop    context.CancelFunc // nil when not reaping
	reaping sync.WaitGroup
	reaped  atomic.Bool // a Reap has listed the leftovers: the engine answers
}

// StartService starts e's reaper; Close stops and waits for it.
func StartService(e *Executor) *Service {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Service{Executor: e, stop: cancel}
	r.reaping.Go(func() { r.reap(ctx) })
	return r
}

// Ping is Check.
func (r *Service) Ping(ctx context.Context) error { return r.Check(ctx) }

// reapEvery is how often the reaper looks again once it has reaped: a
// container a killed predecessor asked for may be made by the engine after
// the first look (its create was still on its way), and nothing else
// would remove it, since it never starts.
const reapEvery = 30 * time.Second

// closeReapWait bounds the last reap at Close.
const closeReapWait = 3 * time.Second

// reap calls Reap until it could list the leftovers, then again every
// reapEvery. A leftover it cannot remove is handed by Reap to the
// background retries (stuck.go).
func (r *Service) reap(ctx context.Context) {
	log := r.cfg.Logger
	b := retry.Policy{Initial: time.Second, Max: 30 * time.Second}.New()
	_ = backoff.RetryNotify(func() error {
		return r.reapOnce(ctx)
	}, backoff.WithContext(b, ctx), func(err error, retry time.Duration) {
		log.Warn("reap leftover sandboxes; retrying", "err", err, "retry_in", retry.Round(time.Millisecond))
	})
	tick := time.NewTicker(reapEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			_ = r.reapOnce(ctx) // a failed look is tried at the next tick
		}
	}
}

func (r *Service) reapOnce(ctx context.Context) error {
	n, err := r.Reap(ctx)
	if err == nil {
		r.reaped.Store(true)
	}
	if n > 0 {
		r.cfg.Logger.Info("reaped leftover sandboxes", "count", n)
	}
	return err
}

// Close stops the reaper, reaps once more (what a predecessor's late
// creates made since the last look) if the engine has answered a reap
// before, for at most closeReapWait, then closes the executor. A stop
// does not wait on an engine that never answered.
func (r *Service) Close() error {
	if r.stop != nil {
		r.stop()
		r.reaping.Wait()
		if r.reaped.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), closeReapWait)
			_ = r.reapOnce(ctx)
			cancel()
		}
	}
	return r.Executor.Close()
}
