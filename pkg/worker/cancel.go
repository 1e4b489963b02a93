package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// maxCancelSet bounds the cancel requests a worker keeps in memory; past
// it, each job looks its request up in CANCELS instead.
const maxCancelSet = 100_000

// cancelSet is what the watcher has seen of CANCELS: once it has read the
// bucket through (synced), a job about to run looks its ID up here rather
// than asking the server, a round trip fewer per job. A request stored
// after the job registered as running reaches it through the watcher
// either way: the watcher adds an ID before it cancels the runs of it, and
// a job registers before it looks.
type cancelSet struct {
	mu     sync.Mutex
	synced bool
	ttl    time.Duration        // the bucket's: an older request has expired there
	ids    map[string]time.Time // when each request was stored
}

// has reports whether id has a cancel request, and whether the set knows.
// A request older than the bucket's TTL has expired from it, and the
// server expires keys without telling watchers.
func (c *cancelSet) has(id string) (found, known bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, found := c.ids[id]
	if found && c.ttl > 0 && time.Since(at) > c.ttl {
		delete(c.ids, id)
		found = false
	}
	return found, c.synced
}

func (c *cancelSet) update(op jetstream.KeyValueOp, id string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil {
		return // given up: too many
	}
	if op == jetstream.KeyValuePut {
		c.ids[id] = at
	} else {
		delete(c.ids, id)
	}
	if len(c.ids) > maxCancelSet {
		c.ids, c.synced = nil, false
	}
}

func (c *cancelSet) setSynced(v bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.synced = v && c.ids != nil
}

// watchCancels handles the cancel requests stored in CANCELS: a job
// running here has its context canceled; a job of this queue still queued
// is finished as canceled at once (cancelQueued). The requests stored
// before it started are read first, into w.cancels only.
func (w *Worker) watchCancels(ctx context.Context) {
	watch, err := w.stores.Cancels.WatchAll(ctx)
	if err != nil {
		w.log.Error("watch cancel requests; cancel of running jobs will not work", "err", err)
		return
	}
	defer watch.Stop()
	defer w.cancels.setSynced(false)
	initial := true
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-watch.Updates():
			if !ok {
				return
			}
			if e == nil { // the bucket read through: updates from here on
				initial = false
				w.cancels.setSynced(true)
				continue
			}
			w.cancels.update(e.Operation(), e.Key(), e.Created())
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			if !w.cancelRunning(e.Key()) && !initial {
				w.cancelQueued(ctx, e.Key())
			}
		}
	}
}

// cancelRunning cancels the job if it runs here, and reports whether it did.
func (w *Worker) cancelRunning(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
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

// cancelQueued finishes as canceled a job of one of its lanes that was never
// delivered, so that a client need not wait for a free slot, nor be
// allowed to write RESULTS itself. Every worker of the queue races to do it
// (finalize: one result, one removal). A job already delivered is left to
// its holder, who watches CANCELS too, or to its next delivery, which
// finds the request before running it.
func (w *Worker) cancelQueued(ctx context.Context, id string) {
	if !jobs.ValidID(id) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	log := w.log.With("job_id", id)
	var (
		m  *jetstream.RawStreamMsg
		ln *lane
	)
	for _, l := range w.lanes {
		var err error
		m, err = w.stores.Stream.GetLastMsgForSubject(ctx, jobs.Subject(l.Queue, id))
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
	if _, removed := w.finalize(ctx, m, 0, jobs.StatusCanceled, jobs.CancelReason, log); removed {
		log.Info("queued job canceled", "status", string(jobs.StatusCanceled))
	}
}
