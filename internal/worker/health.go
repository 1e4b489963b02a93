package worker

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// Status returns what the worker's heartbeat says.
func (w *Worker) Status() jobs.WorkerStatus {
	lastErr := w.health.lastError()
	var pool *jobs.PoolStatus
	if p, ok := w.exec.(PoolReporter); ok {
		pool = p.WarmPool()
	}
	return jobs.WorkerStatus{
		Pool:      pool,
		ID:        w.cfg.ID,
		Queue:     w.cfg.Queue,
		Queues:    laneNames(w.cfg.Queues),
		Version:   w.cfg.Version,
		Slots:     w.cfg.Slots,
		Busy:      int(w.busy.Load()),
		Ready:     w.health.ready(),
		Draining:  w.draining.Load(),
		LastError: lastErr,
		StartedAt: w.start,
		LastSeen:  time.Now().UTC(),
	}
}

// heartbeat keeps the worker's entry in WORKERS fresh, and writes it at
// once when the prober learns something of the executor's health.
func (w *Worker) heartbeat(ctx context.Context) {
	t := time.NewTicker(w.cfg.Topology.WorkerTTL / 3)
	defer t.Stop()
	for {
		data, _ := json.Marshal(w.Status())
		if _, err := w.stores.Workers.Put(ctx, w.cfg.ID, data); err != nil && ctx.Err() == nil {
			w.log.Warn("heartbeat", "err", err)
		}
		select {
		case <-t.C:
		case <-w.beat:
		case <-ctx.Done():
			return
		}
	}
}

// errNotChecked is why a worker whose executor is a Pinger is not ready
// before its first ping answered.
var errNotChecked = errors.New("executor not checked yet")

// probe keeps the executor's health. While it is up, a Pinger is pinged
// every WorkerTTL/3, so that an idle worker does not claim to be ready on
// an engine that died or a runtime that broke. Once it is down (a Run or a
// ping failed), it is pinged until it answers (see recover) and marked up
// again.
func (w *Worker) probe(ctx context.Context) {
	pinger, _ := w.exec.(Pinger)
	check := time.NewTicker(w.cfg.Topology.WorkerTTL / 3)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-check.C:
			if pinger != nil && w.health.ready() {
				if err := pinger.Ping(ctx); err != nil && ctx.Err() == nil {
					w.log.Error("executor check failed; not fetching until it passes", "err", err)
					w.health.down(err) // kicks the next round
					w.beatNow()
				}
			}
			continue
		case <-w.health.kick:
		}
		if !w.recover(ctx, pinger) {
			return
		}
		w.log.Info("executor up")
		w.health.up()
		w.beatNow()
	}
}

// beatNow has the heartbeat written without waiting for its tick.
func (w *Worker) beatNow() {
	select {
	case w.beat <- struct{}{}:
	default:
	}
}

// recover pings the executor with back-off until it answers, and reports
// false if ctx ended first. Each failure becomes the reason the worker is
// not ready. Without a Pinger it only waits one back-off step: the held
// job's next Run is the probe.
func (w *Worker) recover(ctx context.Context, pinger Pinger) bool {
	b := w.cfg.Backoff()
	for {
		d := b.NextBackOff()
		if d == backoff.Stop {
			d = 30 * time.Second
		}
		if pinger != nil {
			err := pinger.Ping(ctx)
			if ctx.Err() != nil {
				return false
			}
			if err == nil {
				return true
			}
			var hint interface{ RetryAfter() time.Duration }
			if errors.As(err, &hint) {
				d = max(hint.RetryAfter(), 10*time.Millisecond)
			}
			w.log.Warn("executor still down", "err", err, "retry_in", d.Round(time.Millisecond))
			w.health.down(err)
			w.beatNow()
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return false
		}
		if pinger == nil {
			return true
		}
	}
}

// health gates fetching on the executor's infrastructure.
type health struct {
	mu   sync.Mutex
	ok   chan struct{} // closed while up
	gone chan struct{} // closed while down
	err  error
	kick chan struct{} // wakes the prober
}

func newHealth() *health {
	ok := make(chan struct{})
	close(ok)
	return &health{ok: ok, gone: make(chan struct{}), kick: make(chan struct{}, 1)}
}

func (h *health) down(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err = err
	select {
	case <-h.ok:
		h.ok = make(chan struct{})
		close(h.gone)
		select {
		case h.kick <- struct{}{}:
		default:
		}
	default:
	}
}

func (h *health) up() {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.ok:
	default:
		close(h.ok)
		h.gone = make(chan struct{})
	}
}

func (h *health) upCh() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ok
}

// downCh is closed when the executor is (next) reported down.
func (h *health) downCh() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gone
}

func (h *health) ready() bool {
	select {
	case <-h.upCh():
		return true
	default:
		return false
	}
}

func (h *health) lastError() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil || h.ready0() {
		return ""
	}
	return h.err.Error()
}

// ready0 is ready with h.mu held.
func (h *health) ready0() bool {
	select {
	case <-h.ok:
		return true
	default:
		return false
	}
}

func (h *health) wait(ctx context.Context) error {
	select {
	case <-h.upCh():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
