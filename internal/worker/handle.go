package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// handBackDelay is the delay of a hand-back's nak (verdictNak): the least
// there is, so that the server stores the hand-back (see settle).
const handBackDelay = time.Nanosecond

// verdict is what happens to a message once its job is handled.
type verdict int

const (
	verdictAck      verdict = iota // result stored: DoubleAck removes the job
	verdictTerm                    // the job is invalid: never redeliver
	verdictNak                     // forced stop or drain: redeliver now
	verdictNakDelay                // not the job's fault: redeliver after NakDelay
)

func (v verdict) String() string {
	return [...]string{"ack", "term", "nak", "nak_delay"}[v]
}

// decision is the one classification of a handled message.
type decision struct {
	verdict verdict
	result  *jobs.Result // the stored result, when there is one
	reason  string       // why, for logs and TermWithReason
}

// handle takes a job's message down one path: check it once (check),
// then decide (the workspace, the run, the store) and settle.
func (w *Worker) handle(stop, force context.Context, msg jetstream.Msg) {
	var attempt int
	var queuedAt *time.Time
	if meta, err := msg.Metadata(); err == nil {
		attempt = int(meta.NumDelivered)
		t := meta.Timestamp.UTC()
		queuedAt = &t
	}
	m := w.check(msg.Subject(), msg.Data(), attempt, queuedAt)
	log := w.log.With("job_id", m.id, "attempt", m.attempt)
	w.obs.Delivered(m.attempt)

	// The lease is kept alive for the whole handling: running, holding
	// while the executor is down, and storing the result.
	leaseCtx, stopLease := context.WithCancel(context.Background())
	var leaseWG sync.WaitGroup
	leaseWG.Go(func() { w.keepLease(leaseCtx, msg, log) })
	d := w.decide(stop, force, m, log)
	stopLease()
	leaseWG.Wait()
	w.settle(msg, d, log)
}

func (w *Worker) keepLease(ctx context.Context, msg jetstream.Msg, log *slog.Logger) {
	t := time.NewTicker(w.cfg.Topology.AckWait / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := msg.InProgress(); err != nil {
				log.Warn("extend lease", "err", err)
			}
		}
	}
}

// settle maps a decision to ack, term or nak: the only place that does.
func (w *Worker) settle(msg jetstream.Msg, d decision, log *slog.Logger) {
	var err error
	switch d.verdict {
	case verdictAck:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = msg.DoubleAck(ctx)
		cancel()
	case verdictTerm:
		err = msg.TermWithReason(d.reason)
	case verdictNak:
		// A plain nak only queues the job for redelivery in the server's
		// memory: a server stopped right after it (worker --embedded,
		// whose server stops with the worker; a cluster's consumer leader
		// moving) forgets it, and the job then waits out its lease. A nak
		// with a delay is stored with the consumer's state instead, as a
		// lease that has run out, so the job goes out again at once and
		// still does after the server restarts.
		err = msg.NakWithDelay(handBackDelay)
	case verdictNakDelay:
		err = msg.NakWithDelay(w.cfg.NakDelay)
	}
	if err == nil && d.verdict != verdictAck {
		// Nak and term are publishes nobody answers: flushed, they have
		// reached the server before the worker goes on, and maybe closes
		// its connection. A forced nak lost that way left the job in
		// flight for a whole AckWait.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = w.js.Conn().FlushWithContext(ctx)
		cancel()
	}
	attrs := []any{"verdict", d.verdict.String()}
	if d.result != nil {
		attrs = append(attrs, "status", string(d.result.Status))
		if d.result.DurationMS != nil {
			attrs = append(attrs, "duration_ms", *d.result.DurationMS)
		}
	}
	if d.reason != "" {
		attrs = append(attrs, "reason", d.reason)
	}
	if err != nil {
		// The result, if any, is stored: a redelivery finds it.
		log.Warn("settle message", append(attrs, "err", err)...)
		return
	}
	level := slog.LevelInfo
	if d.verdict != verdictAck {
		level = slog.LevelWarn
	}
	log.Log(context.Background(), level, "job settled", attrs...)
}

// decide handles one message up to, not including, its settlement.
func (w *Worker) decide(stop, force context.Context, m *message, log *slog.Logger) decision {
	if m.bad != nil {
		now := time.Now().UTC()
		res := &jobs.Result{Status: jobs.StatusRejected, Error: m.bad.Error(), FinishedAt: &now}
		w.fill(res, m)
		ev := w.openEvents(m, nil, log)
		defer ev.close(force)
		return w.finish(force, m, res, ev, log)
	}
	job := m.job

	if stored, err := w.lookup(job.ID); err != nil {
		return decision{verdict: verdictNakDelay, reason: "read RESULTS: " + err.Error()}
	} else if stored != nil {
		if job.Workspace != "" {
			// Stored, then died before releasing: release now.
			w.releaseHead(job.Workspace, job.ID, "", log)
		}
		w.reply(m, stored, log)
		return decision{verdict: verdictAck, result: stored, reason: "result already stored"}
	}

	ev := w.openEvents(m, job, log)
	defer ev.close(force)
	ev.redelivered()
	indexed := w.index.running(m, w.cfg.ID)
	defer indexed.end()

	jobCtx, untrack := w.track(force, job, log)
	defer untrack()

	var res *jobs.Result
	var ws *wsStep // the job's workspace and outputs, if any (workspace.go)
	defer func() { ws.close() }()
	if !errors.Is(context.Cause(jobCtx), ErrCancelRequested) {
		var nr notRun
		ws, nr = w.beginWorkspace(stop, jobCtx, job, m.tenant, log)
		if nr.back != nil {
			return *nr.back
		}
		res = nr.result
		if res == nil && jobCtx.Err() == nil {
			// The workspace's restore and archive, and the events' output
			// and start: one jobrun.Options for each run.
			opts := func() jobrun.Options {
				o, e := ws.options(), ev.runOptions()
				o.OnOutput, o.OnStart = e.OnOutput, e.OnStart
				return o
			}
			var d *decision
			res, d = w.runHeld(stop, jobCtx, job, opts, log)
			if d == nil && res != nil {
				d = ws.afterRun(force, res)
			}
			if d != nil {
				ws.abandon()
				return *d
			}
		}
	}
	cause := context.Cause(jobCtx)
	if errors.Is(cause, ErrForced) {
		ws.abandon()
		return decision{verdict: verdictNak, reason: "forced stop"}
	}
	if errors.Is(cause, ErrCancelRequested) {
		res = canceledOnRequest(res)
	}
	w.fill(res, m)
	ev.ended(res)
	indexed.end() // before the finished record
	d := w.finish(force, m, res, ev, log)
	ws.settled(d)
	return d
}

// track gives the job its context, canceled with ErrForced by force and
// with ErrCancelRequested by a cancel request, and registers it with the
// cancel watcher until untrack.
func (w *Worker) track(force context.Context, job *jobs.Job, log *slog.Logger) (jobCtx context.Context, untrack func()) {
	jobCtx, cancel := context.WithCancelCause(context.Background())
	stopForce := context.AfterFunc(force, func() { cancel(ErrForced) })
	r := &run{id: job.ID, cancel: cancel}
	w.mu.Lock()
	w.running[r] = struct{}{}
	w.mu.Unlock()
	// Checked after registering, so a request arriving in between is seen
	// by the watcher.
	if w.cancelRequested(job.ID, log) {
		cancel(ErrCancelRequested)
	}
	return jobCtx, func() {
		w.mu.Lock()
		delete(w.running, r)
		w.mu.Unlock()
		stopForce()
		cancel(nil)
	}
}

// canceledOnRequest is the result of a job whose cancellation was
// requested, from what it had when the request landed.
func canceledOnRequest(res *jobs.Result) *jobs.Result {
	switch {
	case res == nil: // canceled before it ran
		now := time.Now().UTC()
		res = &jobs.Result{Status: jobs.StatusCanceled, Error: ErrCancelRequested.Error(), FinishedAt: &now}
	case res.Status == jobs.StatusCanceled: // the executor stopped it
		res.Error = ErrCancelRequested.Error()
	}
	// Otherwise the job ended on its own before the request landed: its
	// result stands.
	return res
}

// runHeld runs the job. On an infrastructure error it marks the executor
// down (the fetcher pauses and the prober pings with back-off), holds the
// message, and runs it again once the executor is up: no delivery is
// burnt. It gives the job back on drain, force or after HoldMax.
func (w *Worker) runHeld(stop, jobCtx context.Context, job *jobs.Job, opts func() jobrun.Options, log *slog.Logger) (*jobs.Result, *decision) {
	var hold <-chan time.Time
	for {
		log.Debug("running")
		res, err := w.runOnce(jobCtx, job, opts())
		if err == nil {
			if res == nil {
				now := time.Now().UTC()
				res = &jobs.Result{Status: jobs.StatusError, Error: "executor returned no result", FinishedAt: &now}
			}
			w.health.up()
			return res, nil
		}
		if jobCtx.Err() != nil {
			return nil, nil // forced or canceled: decide says which
		}
		log.Error("executor infrastructure failure; holding the job", "err", err)
		w.health.down(err)
		if hold == nil {
			t := time.NewTimer(w.cfg.HoldMax)
			defer t.Stop()
			hold = t.C
			w.held.Add(1)
			defer w.held.Add(-1)
		}
		select {
		case <-w.health.upCh():
		case <-jobCtx.Done():
			return nil, nil
		case <-stop.Done():
			return nil, &decision{verdict: verdictNak, reason: "draining while the executor is down: " + err.Error()}
		case <-hold:
			return nil, &decision{verdict: verdictNakDelay, reason: "executor down for " + w.cfg.HoldMax.String() + ": " + err.Error()}
		}
	}
}

// runOnce calls the executor, turning a panic into an error result: a
// panic is a bug, and retrying it would only repeat it.
func (w *Worker) runOnce(ctx context.Context, job *jobs.Job, opts jobrun.Options) (res *jobs.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			now := time.Now().UTC()
			res, err = &jobs.Result{Status: jobs.StatusError, Error: fmt.Sprintf("executor panicked: %v", p), FinishedAt: &now}, nil
		}
	}()
	return w.exec.Run(ctx, job, opts)
}

// finish stores the result (first writer wins), publishes the stored one to
// the reply subject and decides: term for rejected jobs, ack otherwise. The
// job's events are published before the result, and finished after it.
func (w *Worker) finish(force context.Context, m *message, res *jobs.Result, ev *jobEvents, log *slog.Logger) decision {
	stored := res
	ev.flush(force)
	if m.keyed {
		var err error
		stored, err = w.store(force, res)
		if err != nil && force.Err() != nil {
			return decision{verdict: verdictNak, result: res, reason: "forced stop while storing the result: " + err.Error()}
		}
		if err != nil {
			return decision{verdict: verdictNakDelay, result: res, reason: "store result: " + err.Error()}
		}
	} else {
		log.Warn("result not stored: the subject's ID is not a valid key", "status", res.Status)
	}
	if stored != res {
		w.dropArtifacts(m, res.Artifacts, log)
	}
	w.finished(m, stored, stored == res, false)
	ev.finished(stored)
	w.reply(m, stored, log)
	if stored.Status == jobs.StatusRejected {
		return decision{verdict: verdictTerm, result: stored, reason: stored.Error}
	}
	return decision{verdict: verdictAck, result: stored}
}

// finished is told of each job this worker ends, with the result stored
// for it (won: this worker's; otherwise an earlier writer's, such as a
// cancel's): the one place a job's end is recorded, for metrics (the
// winner only, so that a fleet counts each job once) and in the index;
// dead marks a job given up after MaxDeliver.
func (w *Worker) finished(m *message, stored *jobs.Result, won, dead bool) {
	if won {
		w.obs.Finished(stored, presetOf(m.job), m.queue)
	}
	w.index.finished(m, stored, dead)
}

// store writes the result with retries; on a conflict the winner's result
// is returned. It gives up after HoldMax or on force, but lets a write
// under way finish: a job that ended a moment before a force keeps its
// result instead of running again.
func (w *Worker) store(force context.Context, res *jobs.Result) (*jobs.Result, error) {
	ctx, cancel := context.WithTimeout(force, w.cfg.HoldMax)
	defer cancel()
	return backoff.RetryWithData(func() (*jobs.Result, error) {
		actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer acancel()
		stored, _, err := records.StoreResult(actx, w.stores.Results, res, w.stores.MaxResultBytes)
		if err != nil {
			w.log.Warn("store result", "job_id", res.ID, "err", err)
		}
		return stored, err
	}, backoff.WithContext(w.cfg.Backoff(), ctx))
}

func (w *Worker) lookup(id string) (*jobs.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := w.stores.Results.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return jobs.DecodeStoredResult(e.Key(), e.Value())
}

// cancelRequested reports whether CANCELS holds a request for the job:
// from what the watch read of it, or, while the watch has not read it
// all, from CANCELS itself. A request older than the bucket's TTL has
// expired there, which no watcher is told of: a job ID used again after
// its request and result expired runs.
func (w *Worker) cancelRequested(id string, log *slog.Logger) bool {
	w.mu.Lock()
	at, found := w.cancels[id]
	known := w.cancels != nil
	if found && w.cfg.Topology.ResultTTL > 0 && time.Since(at) > w.cfg.Topology.ResultTTL {
		delete(w.cancels, id)
		found = false
	}
	w.mu.Unlock()
	if known {
		return found
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := w.stores.Cancels.Get(ctx, id)
	if err == nil {
		return true
	}
	if !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted) {
		log.Warn("read CANCELS", "err", err)
	}
	return false
}

// reply publishes the result to the job's reply subject, if it has a valid
// one (check decided, for a rejected job too: published to
// $KV.RESULTS.<id> it would overwrite another job's result, to $JS.API.*
// it would be an API call, to another tenant's inbox a forged reply).
// Best effort: the result is in RESULTS either way.
func (w *Worker) reply(m *message, res *jobs.Result, log *slog.Logger) {
	if m.replyTo == "" {
		return
	}
	data, err := json.Marshal(res)
	if err == nil {
		err = w.js.Conn().Publish(m.replyTo, data)
	}
	if err != nil {
		log.Warn("publish result to reply_to", "reply_to", m.replyTo, "err", err)
	}
}
