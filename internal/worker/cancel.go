package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// watchCancels handles the cancel requests stored in CANCELS: a job
// running here has its context canceled; a job of this queue still queued
// is finished as canceled (cancelQueued), by lookups beside the watch
// that a flood of requests cannot put in front of the next one (see
// queuedCancels). It also keeps the IDs
// that have a request (w.cancels), so that a job it takes is checked
// without a read of CANCELS: from the end of the watch's initial values,
// which are every request stored, until the watch ends.
//
// A watch that cannot start, or ends, is started again with back-off:
// until then jobs read CANCELS before they run, and the next watch's
// initial values cancel the running jobs whose requests came meanwhile.
func (w *Worker) watchCancels(ctx context.Context) {
	var b backoff.BackOff
	for {
		read, err := w.watchCancelsOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if b == nil || read {
			b = w.cfg.Backoff()
		}
		d := retryIn(b)
		w.log.Warn("watch cancel requests; retrying (meanwhile running jobs are not canceled)", "err", err, "retry_in", d)
		if !sleep(ctx, d) {
			return
		}
	}
}

// watchCancelsOnce is one watch of CANCELS, until ctx ends or the watch
// does; read says whether it read the initial values.
func (w *Worker) watchCancelsOnce(ctx context.Context) (read bool, err error) {
	watch, err := w.stores.Cancels.WatchAll(ctx)
	if err != nil {
		return false, err
	}
	defer watch.Stop()
	defer w.forgetCancels()
	ids := map[string]time.Time{} // nil once given up, or handed to w.cancels
	// A request for a job not running here costs a lookup in JOBS per
	// lane: done beside the watch, so that the requests behind it (a
	// running job's, which only this watch can cancel) need not wait.
	queued := newQueuedCancels()
	var lookups sync.WaitGroup
	lctx, stopLookups := context.WithCancel(ctx)
	lookups.Go(func() { w.lookUpQueued(lctx, queued) })
	defer lookups.Wait()
	defer stopLookups()
	initial := true
	prune := time.NewTicker(cancelPruneEvery)
	defer prune.Stop()
	for {
		select {
		case <-ctx.Done():
			return !initial, nil
		case <-prune.C:
			w.pruneCancels()
		case e, ok := <-watch.Updates():
			if !ok {
				return !initial, errors.New("the watch ended")
			}
			if e == nil {
				// The initial values are in: from now on, w.cancels
				// answers for CANCELS.
				w.mu.Lock()
				w.cancels, ids = ids, nil
				w.mu.Unlock()
				initial = false
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				w.mu.Lock()
				delete(ids, e.Key())
				delete(w.cancels, e.Key())
				w.mu.Unlock()
				continue
			}
			if initial {
				// A request stored before the watch began: for a job
				// that is no longer queued, or one the worker took in
				// the meantime.
				if ids != nil {
					ids[e.Key()] = e.Created()
				}
				if len(ids) > maxCancels {
					ids = nil // too many to keep: every job reads CANCELS
				}
				w.cancelRunning(e.Key(), e.Created())
				continue
			}
			if !w.cancelRunning(e.Key(), e.Created()) {
				queued.add(e.Key(), w.log)
			}
		}
	}
}

// maxCancels bounds the requests a worker keeps (a tenant may store as
// many as CANCELS takes); past it, every job reads CANCELS.
const maxCancels = 100_000

// cancelPruneEvery is how often the requests CANCELS no longer holds (its
// entries expire after ResultTTL) are forgotten.
const cancelPruneEvery = 10 * time.Minute

func (w *Worker) pruneCancels() {
	ttl := w.cfg.Topology.ResultTTL
	if ttl <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, at := range w.cancels {
		if time.Since(at) > ttl {
			delete(w.cancels, id)
		}
	}
}

// forgetCancels is the end of the watch: jobs read CANCELS again.
func (w *Worker) forgetCancels() {
	w.mu.Lock()
	w.cancels = nil
	w.mu.Unlock()
}

// cancelRunning records the request and cancels the job if it runs here,
// and reports whether it did. Both under w.mu: a job registered after
// this finds the request in w.cancels.
func (w *Worker) cancelRunning(id string, at time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancels != nil {
		w.cancels[id] = at
		if len(w.cancels) > maxCancels {
			w.cancels = nil // too many to keep: every job reads CANCELS
		}
	}
	found := false
	for r := range w.running {
		if r.id == id {
			w.log.Info("cancel requested", "job_id", r.id)
			r.cancel(ErrCancelRequested)
			found = true
		}
	}
	return found
}

// queuedCancels are the requests for jobs that do not run here, waiting
// for cancelQueued's lookups: kept per tenant and taken in turn, so that
// a tenant that floods CANCELS delays another's queued job by one lookup
// per round at most, and bounded, so that the flood costs no more than
// maxQueuedPerTenant IDs. A request left out is not lost: it is in
// CANCELS, and the job's delivery, finding it there (or in w.cancels),
// ends the job as canceled before it runs.
type queuedCancels struct {
	mu      sync.Mutex
	pending map[string][]string // by tenant ("": none), oldest first
	turn    []string            // the tenants with requests pending, in turn
	full    map[string]bool     // tenants whose queue is full, logged once until it empties
	wake    chan struct{}
}

// The bounds of queuedCancels.
const (
	maxQueuedPerTenant = 1024
	maxQueuedTenants   = 1024
)

func newQueuedCancels() *queuedCancels {
	return &queuedCancels{pending: map[string][]string{}, full: map[string]bool{}, wake: make(chan struct{}, 1)}
}

// add queues a request for job id, unless its tenant's queue is full.
func (q *queuedCancels) add(id string, log *slog.Logger) {
	if !jobs.ValidID(id) {
		return
	}
	t := jobs.TenantOf(id)
	q.mu.Lock()
	p, ok := q.pending[t]
	switch {
	case !ok && len(q.pending) >= maxQueuedTenants, len(p) >= maxQueuedPerTenant:
		if !q.full[t] && len(q.full) < maxQueuedTenants {
			q.full[t] = true
			log.Warn("cancel requests for jobs not running here come faster than they are looked up; "+
				"the queued jobs of those left out are canceled at their delivery", "tenant", t, "pending", len(p))
		}
		q.mu.Unlock()
		return
	case !ok:
		q.turn = append(q.turn, t)
	}
	q.pending[t] = append(p, id)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// next takes the oldest request of the tenant whose turn it is.
func (q *queuedCancels) next() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.turn) == 0 {
		return "", false
	}
	t := q.turn[0]
	p := q.pending[t]
	id := p[0]
	q.turn = q.turn[1:]
	if len(p) == 1 {
		delete(q.pending, t)
		delete(q.full, t)
	} else {
		q.pending[t] = p[1:]
		q.turn = append(q.turn, t)
	}
	return id, true
}

// lookUpQueued runs cancelQueued for the queued requests, one at a time,
// until ctx ends.
func (w *Worker) lookUpQueued(ctx context.Context, q *queuedCancels) {
	for {
		id, ok := q.next()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-q.wake:
				continue
			}
		}
		if ctx.Err() != nil {
			return
		}
		w.cancelQueued(ctx, id)
	}
}

// cancelQueued finishes as canceled a job of one of its lanes that was never
// delivered, so that a client need not wait for a free slot, nor be
// allowed to write RESULTS itself. Every worker of the queue races to do it
// (finalize: one result, one removal). A job already delivered is left to
// its holder, who watches CANCELS too, or to its next delivery, which
// finds the request before running it.
func (w *Worker) cancelQueued(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	log := w.log.With("job_id", id)
	var (
		m  *jetstream.RawStreamMsg
		ln *lane
	)
	for _, l := range w.lanes {
		var err error
		m, err = w.stores.Stream.GetLastMsgForSubject(ctx, fleet.Subject(l.Queue, id))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // another lane's or queue's job, or finished
		}
		if err != nil {
			log.Warn("cancel: look the job up; its next delivery will cancel it", "err", err)
			return
		}
		ln = l
		break
	}
	if ln == nil {
		return
	}
	// The consumer delivers in stream order: a message past its delivered
	// sequence has never been handed to a worker.
	info, err := ln.cons.Info(ctx)
	if err != nil {
		log.Warn("cancel: consumer info; the job's delivery will cancel it", "err", err)
		return
	}
	if m.Sequence <= info.Delivered.Stream {
		return
	}
	if _, removed := w.finalize(ctx, m, 0, jobs.StatusCanceled, fleet.CancelReason, log); removed {
		log.Info("queued job canceled", "status", string(jobs.StatusCanceled))
	}
}
