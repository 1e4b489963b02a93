package worker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// A job's events (jobs.Event: its output as it is written, and its
// lifecycle) go to events.<id> while it runs, for watchers; the result in
// RESULTS stays the authority. Publishing them must never slow a job down
// or break it, so the executor's callbacks only queue, into a queue of
// bounded size, and one goroutine per delivery publishes. When the broker
// is slower than the job, what does not fit is dropped and published as a
// gap (how many bytes, from which offset) once there is room again.
//
// What one delivery may put in the stream is bounded too: each stream's
// output up to the job's output cap (past it, output_truncated), and its
// output events to eventBudget all told.
const (
	// eventChunk is the most output one event carries, and the queued
	// output that is published without waiting for eventInterval.
	eventChunk = 16 << 10
	// eventInterval is how long output waits to be coalesced with what the
	// job writes next: the most it adds to a watcher's latency.
	eventInterval = 50 * time.Millisecond
	// eventQueueMax bounds the output queued per delivery, the memory a
	// slow broker can make a job's events take.
	eventQueueMax = 1 << 20
	// eventItemsMax bounds the events queued per delivery (small writes to
	// stdout and stderr in turn are one event each).
	eventItemsMax = 1024
	// eventUrgentItems queued events are published without waiting.
	eventUrgentItems = 64
	// eventOverhead is what a delivery's output events may take beyond the
	// output itself (the JSON around it): eventBudget is twice the output
	// cap (stdout and stderr) plus this.
	eventOverhead = 256 << 10
	// eventPublishTimeout bounds one publish.
	eventPublishTimeout = 5 * time.Second
	// eventFlushWait is how long the result waits for the job's events to
	// be stored before it; past it, output left to publish goes as gaps,
	// and past twice as long the result is stored regardless (a watcher
	// may then end before the last events).
	eventFlushWait = 2 * time.Second
	// eventCloseWait is how long a delivery waits, after its result, for
	// what is left to publish.
	eventCloseWait = 5 * time.Second
)

// eventSink is what events need of the worker's JetStream (which a test
// may wrap to make the broker slow).
type eventSink interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
	// PublishNoAck publishes msg to the stream without asking for its
	// ack: for a delivery's finished event, which nothing comes after,
	// and which a follower does without (it ends on the stored result).
	PublishNoAck(msg *nats.Msg) error
}

// jsSink is the worker's JetStream as an eventSink.
type jsSink struct{ jetstream.JetStream }

func (s jsSink) PublishNoAck(msg *nats.Msg) error { return s.Conn().PublishMsg(msg) }

var _ eventSink = jsSink{}

// jobEvents publishes the events of one delivery of a job. A nil
// *jobEvents publishes nothing: every method may be called on it.
type jobEvents struct {
	sink    eventSink
	subject string
	id      string
	attempt int
	worker  string
	log     *slog.Logger

	ctx       context.Context // canceled when publishing must stop at once
	cancel    context.CancelFunc
	wake      chan struct{}      // something was queued (1-buffered)
	flushC    chan chan struct{} // publish what is queued, then close the channel
	stop      chan struct{}      // closed: publish what is queued and exit
	closeOnce sync.Once
	exited    chan struct{}

	mu      sync.Mutex
	queue   []*queuedEvent
	queuedB int       // output bytes in queue
	oldest  time.Time // when the oldest output in queue was queued
	urgent  bool      // publish what is queued without waiting
	out     [2]outState
	cap     int64 // the job's output cap, per stream

	// The publishing goroutine's own: what is left of the run's budget.
	budget    int64
	overShare [2]bool // output_truncated published for the budget

	hurry atomic.Bool // the result waited for the events in vain
}

// outState is one output stream of the current run, as queued.
type outState struct {
	seen      int64 // bytes told so far: the offset of the next one
	lostAt    int64 // the first byte not queued since the last queued one
	lost      int64 // bytes not queued from lostAt: a gap to publish
	truncated bool  // past the cap: output_truncated is queued
}

// queuedEvent is an event waiting to be published; data is an output
// event's bytes, budget a started event's for its run.
type queuedEvent struct {
	ev     jobs.Event
	data   []byte
	budget int64
}

func streamIndex(s jobs.Stream) int {
	if s == jobs.Stderr {
		return 1
	}
	return 0
}

// openEvents starts publishing the events of one delivery of job id, or
// returns nil when events are off or id is no subject token.
func (w *Worker) openEvents(m *message, job *jobs.Job, log *slog.Logger) *jobEvents {
	if w.cfg.NoEvents || !m.named {
		return nil
	}
	if m.tenant != "" && !w.tenantEvents(m.tenant, log) {
		return nil
	}
	lim := limits.Default()
	if job != nil {
		lim = job.Limits.Fill(lim)
	}
	return newJobEvents(jsSink{w.js}, m.id, m.attempt, w.cfg.ID, int64(lim.Output), log)
}

// tenantEvents reports whether the stream of tenant t's events is there,
// creating it the first time this worker publishes an event of t's:
// workers know no tenants before their jobs name them. A job whose
// tenant's stream cannot be made runs without events (Follow yields its
// result), and the next job tries again.
func (w *Worker) tenantEvents(t string, log *slog.Logger) bool {
	w.objMu.Lock()
	ok := w.events[t]
	w.objMu.Unlock()
	if ok {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.cfg.Topology.EnsureTenantEvents(ctx, w.js, t); err != nil {
		log.Warn("no events for this job", "tenant", t, "err", err)
		return false
	}
	w.objMu.Lock()
	w.events[t] = true
	w.objMu.Unlock()
	return true
}

// newJobEvents starts publishing the events of one delivery to sink, the
// output of each stream capped at outputCap until a run says otherwise.
func newJobEvents(sink eventSink, id string, attempt int, worker string, outputCap int64, log *slog.Logger) *jobEvents {
	ctx, cancel := context.WithCancel(context.Background())
	e := &jobEvents{
		sink: sink, subject: fleet.EventSubject(id), id: id, attempt: attempt, worker: worker, log: log,
		ctx: ctx, cancel: cancel,
		wake: make(chan struct{}, 1), flushC: make(chan chan struct{}), stop: make(chan struct{}), exited: make(chan struct{}),
		cap: outputCap, budget: 2*outputCap + eventOverhead,
	}
	go e.loop()
	return e
}

// runOptions are the executor's callbacks into e.
func (e *jobEvents) runOptions() jobrun.Options {
	if e == nil {
		return jobrun.Options{}
	}
	return jobrun.Options{OnOutput: e.output, OnStart: e.started}
}

// redelivered says that this delivery is not the first.
func (e *jobEvents) redelivered() {
	if e == nil || e.attempt < 2 {
		return
	}
	e.event(jobs.Event{Type: jobs.EventRedelivered, Worker: e.worker})
}

// started is jobrun.Options.OnStart: a run begins, and its output with it.
func (e *jobEvents) started(s jobrun.Start) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gapsLocked()
	e.out = [2]outState{}
	if s.Limits.Output > 0 {
		e.cap = int64(s.Limits.Output)
	}
	e.queueLocked(&queuedEvent{ev: jobs.Event{Type: jobs.EventStarted, Worker: e.worker, Container: s.Container},
		budget: 2*e.cap + eventOverhead}, true)
}

// output is jobrun.Options.OnOutput: it queues p, as far as the cap and the
// queue allow, and never blocks for longer than the mutex is held.
func (e *jobEvents) output(s jobs.Stream, p []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := &e.out[streamIndex(s)]
	off := st.seen
	st.seen += int64(len(p))
	over := false
	if room := e.cap - off; room < int64(len(p)) {
		p, over = p[:max(room, 0)], true
	}
	fit := max(min(len(p), eventQueueMax-e.queuedB), 0)
	if len(e.queue) >= eventItemsMax && !e.joinsLast(s, off) {
		fit = 0
	}
	if fit > 0 {
		e.gapLocked(s)
		e.appendLocked(s, off, p[:fit])
	}
	if fit < len(p) {
		if st.lost == 0 {
			st.lostAt = off + int64(fit)
		}
		st.lost += int64(len(p) - fit)
	}
	if over && !st.truncated {
		st.truncated = true
		e.gapLocked(s)
		e.queueLocked(&queuedEvent{ev: jobs.Event{Type: jobs.EventOutputTruncated, Stream: s, Offset: e.cap}}, true)
	}
}

// ended says how the sandbox was stopped, when it was killed.
func (e *jobEvents) ended(res *jobs.Result) {
	if e == nil || res == nil {
		return
	}
	t, ok := map[jobs.Status]jobs.EventType{
		jobs.StatusTimeout:  jobs.EventTimeout,
		jobs.StatusOOM:      jobs.EventOOM,
		jobs.StatusCanceled: jobs.EventCanceled,
	}[res.Status]
	if ok {
		e.event(jobs.Event{Type: t, Error: res.Error})
	}
}

// finished queues the last event: the stored result, without its output,
// which the output events before it carry.
func (e *jobEvents) finished(stored *jobs.Result) {
	if e == nil {
		return
	}
	r := *stored
	r.Stdout, r.Stderr, r.StdoutEncoding, r.StderrEncoding = "", "", "", ""
	e.event(jobs.Event{Type: jobs.EventFinished, Result: &r})
}

func (e *jobEvents) event(ev jobs.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gapsLocked()
	e.queueLocked(&queuedEvent{ev: ev}, true)
}

// flush publishes what is queued and waits until it is stored, so that
// the result is stored after the job's events. After eventFlushWait the
// output still queued is published as gaps (hurry), which the broker
// takes faster; after as long again the result goes first.
func (e *jobEvents) flush(force context.Context) {
	if e == nil {
		return
	}
	t := time.NewTimer(eventFlushWait)
	defer t.Stop()
	done := make(chan struct{})
	req := e.flushC
	for {
		var wait chan struct{}
		if req == nil {
			wait = done
		}
		select {
		case req <- done:
			req = nil
		case <-wait:
			return
		case <-t.C:
			if e.hurry.Load() {
				e.log.Warn("job events not stored in time; storing the result first", "wait", 2*eventFlushWait)
				return
			}
			e.hurry.Store(true)
			e.log.Warn("job events behind; the output left to publish goes as gaps", "wait", eventFlushWait)
			t.Reset(eventFlushWait)
		case <-force.Done():
			return
		}
	}
}

// close publishes what is left, for eventCloseWait at most (not at all
// once force is canceled), and stops the publishing goroutine.
func (e *jobEvents) close(force context.Context) {
	if e == nil {
		return
	}
	e.closeOnce.Do(func() { close(e.stop) })
	t := time.NewTimer(eventCloseWait)
	defer t.Stop()
	select {
	case <-e.exited:
	case <-t.C:
		e.log.Warn("job events left unpublished", "wait", eventCloseWait)
	case <-force.Done():
	}
	e.cancel()
	<-e.exited
}

// joinsLast reports whether output of s at off continues the last queued
// event.
func (e *jobEvents) joinsLast(s jobs.Stream, off int64) bool {
	if len(e.queue) == 0 {
		return false
	}
	last := e.queue[len(e.queue)-1]
	return last.ev.Type == jobs.EventOutput && last.ev.Stream == s &&
		last.ev.Offset+int64(len(last.data)) == off && len(last.data) < eventChunk
}

// appendLocked queues output p of s at off, in chunks of at most
// eventChunk, continuing the last queued event when it can.
func (e *jobEvents) appendLocked(s jobs.Stream, off int64, p []byte) {
	e.queuedB += len(p)
	if e.oldest.IsZero() {
		e.oldest = time.Now()
	}
	for len(p) > 0 {
		if e.joinsLast(s, off) {
			last := e.queue[len(e.queue)-1]
			if n := chunkCut(p, eventChunk-len(last.data), false); n > 0 {
				last.data = append(last.data, p[:n]...)
				p, off = p[n:], off+int64(n)
				continue
			}
		}
		n := chunkCut(p, eventChunk, true)
		data := make([]byte, n, min(eventChunk, max(n, 256)))
		copy(data, p)
		e.queueLocked(&queuedEvent{ev: jobs.Event{Type: jobs.EventOutput, Stream: s, Offset: off}, data: data}, false)
		p, off = p[n:], off+int64(n)
	}
	if e.queuedB >= eventChunk || len(e.queue) >= eventUrgentItems {
		e.urgent = true
		e.signal()
	}
}

// chunkCut returns how much of p goes into room: all of it if it fits,
// else room cut back to the start of a UTF-8 sequence, so that text stays
// text in each event. Where there is none, it returns room when force (p
// is not text), else 0.
func chunkCut(p []byte, room int, force bool) int {
	if len(p) <= room {
		return len(p)
	}
	for i := room; i > room-utf8.UTFMax && i > 0; i-- {
		if utf8.RuneStart(p[i]) {
			return i
		}
	}
	if force {
		return room
	}
	return 0
}

// gapsLocked queues the gaps of both streams.
func (e *jobEvents) gapsLocked() {
	e.gapLocked(jobs.Stdout)
	e.gapLocked(jobs.Stderr)
}

// gapLocked queues the gap of s, if it has one.
func (e *jobEvents) gapLocked(s jobs.Stream) {
	st := &e.out[streamIndex(s)]
	if st.lost == 0 {
		return
	}
	e.queueLocked(&queuedEvent{ev: jobs.Event{Type: jobs.EventGap, Stream: s, Offset: st.lostAt, Bytes: st.lost}}, false)
	st.lost = 0
}

func (e *jobEvents) queueLocked(q *queuedEvent, urgent bool) {
	q.ev.ID, q.ev.Attempt, q.ev.Time = e.id, e.attempt, time.Now().UTC()
	if len(e.queue) == 0 {
		e.signal()
	}
	e.queue = append(e.queue, q)
	if urgent {
		e.urgent = true
		e.signal()
	}
}
