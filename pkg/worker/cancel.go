package worker

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// watchCancels handles the cancel requests stored in CANCELS: a job
// running here has its context canceled; a job of this queue still queued
// is finished as canceled at once (cancelQueued).
func (w *Worker) watchCancels(ctx context.Context) {
	watch, err := w.stores.Cancels.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		w.log.Error("watch cancel requests; cancel of running jobs will not work", "err", err)
		return
	}
	defer watch.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-watch.Updates():
			if !ok {
				return
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			if !w.cancelRunning(e.Key()) {
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
