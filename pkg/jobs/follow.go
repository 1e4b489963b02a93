package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/shorten"
)

// FollowOption changes what Follow yields.
type FollowOption func(*followOptions)

type followOptions struct {
	replayOnly bool
}

// ReplayOnly makes Follow yield the events stored when it is called, and
// the result if it is stored by then, instead of following the job to its
// end. Its last event is finished only if the job had finished.
func ReplayOnly() FollowOption {
	return func(o *followOptions) { o.replayOnly = true }
}

// catchUpIdle is how long Follow waits for events it knows were stored
// (before the result, or before a ReplayOnly call) and has not been
// delivered: longer only if they expired in between, which it then stops
// waiting for.
const catchUpIdle = 5 * time.Second

// Follow yields the events of job id in order, from its first, and ends
// with a finished event that carries the job's stored Result. The first is
// queued (made from the job's message in JOBS, or from its result); then
// come what the workers that ran it published (stream EVENTS, subject
// events.<id>): started, output and the rest, each with its attempt, a
// redelivered before each attempt after the first.
//
// The result is the authority, not the stream: the finished event's Result
// is read from RESULTS. Follow ends when it is stored, once the events
// stored before it have been yielded, even when the worker's own finished
// event never comes (a worker killed between the two, a job canceled while
// queued). A job that finished before the call yields its events, as far
// as EVENTS still keeps them (Topology.EventsMaxAge), then its result.
//
// An unknown ID yields ErrNotFound: call Follow after Submit (nothing is
// missed: the events and the result stay stored). Errors end the
// sequence; so does ctx, with its error. Breaking out of the loop stops
// following and leaves the job running.
func (c *Client) Follow(ctx context.Context, id string, opts ...FollowOption) iter.Seq2[*Event, error] {
	var o followOptions
	for _, opt := range opts {
		opt(&o)
	}
	return func(yield func(*Event, error) bool) {
		if !ValidID(id) {
			yield(nil, fmt.Errorf("%w: %s", ErrNotFound, shorten.Text(id, 140)))
			return
		}
		if c.tenant != "" && TenantOf(id) != c.tenant {
			yield(nil, fmt.Errorf("%w: %s (not tenant %s's)", ErrNotFound, shorten.Text(id, 140), c.tenant))
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		f := &follower{c: c, id: id, o: o}
		if err := f.run(ctx, yield); err != nil {
			yield(nil, err)
		}
	}
}

// follower is one call of Follow. A tenant's binds no stream (it may read
// no stream's info: a subjects filter would list other tenants' jobs): it
// reads its job's result by key, takes a job with no result as queued (it
// may not read JOBS), and reads EVENTS by direct gets of the job's subject
// and a consumer filtered to it, both named in the API subject, where its
// permissions see them.
type follower struct {
	c        *Client
	id       string
	o        followOptions
	events   jetstream.Stream // nil when the fleet has no EVENTS, and for a tenant
	noEvents bool             // a tenant's: the fleet has no EVENTS
}

// resultUpdate is a result stored after Follow looked, or why the watch
// for it ended.
type resultUpdate struct {
	res *Result
	err error
}

// watchResult returns the job's stored result (nil when there is none
// yet) and a channel that delivers the one stored later: a job's result
// is written once. stop ends the watch and waits for it.
func (f *follower) watchResult(ctx context.Context) (initial *Result, later <-chan resultUpdate, stop func(), err error) {
	ch := make(chan resultUpdate, 1)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	stop = func() { cancel(); <-done }
	if f.c.tenant != "" {
		// The watch first, so that a result stored from now on reaches it.
		rw, err := f.c.Watch(ctx, f.id)
		if err != nil {
			cancel()
			return nil, nil, nil, fmt.Errorf("follow %s: %w", f.id, err)
		}
		initial, err = f.c.tenantGet(ctx, f.id)
		if errors.Is(err, ErrNotFound) {
			initial, err = nil, nil
		}
		if err != nil || initial != nil {
			rw.Stop()
			cancel()
			return initial, nil, func() {}, err
		}
		go func() {
			defer close(done)
			defer rw.Stop()
			r, err := rw.Next(ctx)
			ch <- resultUpdate{r, err}
		}()
		return nil, ch, stop, nil
	}
	w, err := f.c.stores.Results.Watch(ctx, f.id)
	if err != nil {
		cancel()
		return nil, nil, nil, fmt.Errorf("follow %s: %w", f.id, err)
	}
	if initial, err = initialResult(ctx, w); err != nil {
		_ = w.Stop()
		cancel()
		return nil, nil, nil, fmt.Errorf("follow %s: %w", f.id, err)
	}
	go func() {
		defer close(done)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				switch {
				case !ok:
					ch <- resultUpdate{err: ErrWatchClosed}
					return
				case e == nil || e.Operation() != jetstream.KeyValuePut:
					continue
				}
				r, err := DecodeStoredResult(e.Key(), e.Value())
				ch <- resultUpdate{r, err}
				return
			}
		}
	}()
	return initial, ch, stop, nil
}

// eventsTimeout bounds each call Follow makes about the stream EVENTS: a
// fleet whose permissions predate it does not answer them.
const eventsTimeout = 5 * time.Second

// run follows the job in three phases: it opens the watch of the result,
// yields the queued event (begin), then relays the stored events until
// the one the result makes the last (relay).
func (f *follower) run(ctx context.Context, yield func(*Event, error) bool) error {
	// The result's watch is opened first: a result stored from now on
	// reaches it, one stored before is its initial value.
	final, updates, stopWatch, err := f.watchResult(ctx)
	if err != nil {
		return err
	}
	defer stopWatch()
	p, more, err := f.begin(ctx, yield, final, updates)
	if err != nil || !more {
		return err
	}
	events, consumeDone, stop, err := f.consume(ctx)
	if err != nil {
		return err
	}
	defer stop()
	if err := p.aim(ctx, f); err != nil {
		return err
	}
	return f.relay(ctx, yield, p, events, consumeDone)
}

// progress is where a follow stands while it relays the stored events.
type progress struct {
	final   *Result             // the stored result, once known
	updates <-chan resultUpdate // the result stored later; nil once none is awaited
	// end is, with ReplayOnly, the last event stored when Follow was
	// called: what is stored then is all there is to yield.
	end uint64
	// target is, once the result is known, the last event stored then:
	// the worker publishes a run's events before it stores the result, so
	// when target is yielded, the job's events are all out.
	target uint64
	seen   uint64 // the sequence of the last event received
}

// begin yields the queued event, after binding EVENTS and, with
// ReplayOnly, noting where it ends. more is false when there is nothing
// more to yield.
func (f *follower) begin(ctx context.Context, yield func(*Event, error) bool, final *Result, updates <-chan resultUpdate) (p *progress, more bool, err error) {
	queued, final, err := f.queued(ctx, final)
	if err != nil {
		return nil, false, err
	}
	if err := f.openEvents(ctx); err != nil {
		return nil, false, err
	}
	p = &progress{final: final, updates: updates}
	if f.o.replayOnly {
		if p.end, err = f.lastSeq(ctx); err != nil {
			return nil, false, err
		}
	}
	if !yield(queued, nil) {
		return nil, false, nil
	}
	if f.o.replayOnly && p.end == 0 && final == nil {
		return nil, false, nil
	}
	return p, true, nil
}

// aim sets the target of a result known already, and stops awaiting one
// that is not wanted: a result stored after the call is not replayed.
func (p *progress) aim(ctx context.Context, f *follower) (err error) {
	if p.final != nil {
		if p.target, err = f.lastSeq(ctx); err != nil {
			return err
		}
	}
	if f.o.replayOnly || p.final != nil {
		p.updates = nil
	}
	return nil
}

// relay yields the events as the consumer delivers them, until the last
// one the result makes the target (then the finished event with the
// result), the end of a replay, or a finished event.
func (f *follower) relay(ctx context.Context, yield func(*Event, error) bool, p *progress, events <-chan jetstream.Msg, consumeDone <-chan struct{}) error {
	idle := time.NewTimer(catchUpIdle)
	defer idle.Stop()
	for {
		switch {
		case p.final != nil && p.seen >= p.target:
			return f.finish(yield, &Event{Type: EventFinished, ID: f.id, Attempt: p.final.Attempt, Time: finishedAt(p.final)}, p.final)
		case p.final == nil && f.o.replayOnly && p.seen >= p.end:
			return nil
		}
		idle.Reset(catchUpIdle)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-consumeDone:
			return fmt.Errorf("follow %s: the events' consumer stopped", f.id)
		case <-idle.C:
			// What was stored and is still not delivered expired (MaxAge)
			// in between.
			if p.final != nil {
				p.target = p.seen
			} else if f.o.replayOnly {
				return nil
			}
		case u := <-p.updates:
			if err := f.stored(ctx, p, u); err != nil {
				return err
			}
		case m := <-events:
			if done, err := f.deliver(ctx, yield, p, m); done || err != nil {
				return err
			}
		}
	}
}

// stored takes in the result stored while the follow relays: the events
// stored by then are the ones left to yield.
func (f *follower) stored(ctx context.Context, p *progress, u resultUpdate) (err error) {
	if u.err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("follow %s: %w", f.id, u.err)
	}
	p.final, p.updates = u.res, nil
	p.target, err = f.lastSeq(ctx)
	return err
}

// deliver yields the event of message m, unless it is not one of this
// job's. done is true when the follow ends: the event was the finished
// one, or the caller stopped.
func (f *follower) deliver(ctx context.Context, yield func(*Event, error) bool, p *progress, m jetstream.Msg) (done bool, err error) {
	meta, err := m.Metadata()
	if err != nil {
		return false, nil
	}
	p.seen = meta.Sequence.Stream
	if p.final != nil && meta.NumPending == 0 && p.seen < p.target {
		// Nothing pending when the server sent m, which may have been
		// before the events up to target were stored: only a fresh look
		// says whether what is left of target expired.
		if last, err := f.lastSeq(ctx); err == nil && last <= p.seen {
			p.target = p.seen
		}
	}
	var ev Event
	if json.Unmarshal(m.Data(), &ev) != nil || ev.ID != f.id {
		return false, nil // only workers write here; skip what is not an event of this job
	}
	ev.Seq = p.seen
	if ev.Type == EventFinished {
		if p.final == nil {
			if p.final, err = f.c.Get(ctx, f.id); err != nil {
				return true, err
			}
		}
		return true, f.finish(yield, &ev, p.final)
	}
	return !yield(&ev, nil), nil
}

// finish yields the last event with the stored result.
func (f *follower) finish(yield func(*Event, error) bool, ev *Event, res *Result) error {
	ev.Result = res
	yield(ev, nil)
	return nil
}

// initialResult reads a result watch's initial value: the stored result,
// or nil when there is none.
func initialResult(ctx context.Context, w jetstream.KeyWatcher) (*Result, error) {
	var res *Result
	err := initialValues(ctx, w, ErrWatchClosed, func(e jetstream.KeyValueEntry) (err error) {
		res, err = DecodeStoredResult(e.Key(), e.Value())
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// initialValues calls each for every value a watch delivers before the
// end of its initial values (deleted keys are skipped), and stops at the
// first error each returns.
// A watch that closes before that end returns closed.
func initialValues(ctx context.Context, w jetstream.KeyWatcher, closed error, each func(jetstream.KeyValueEntry) error) error {
	for {
		e, err := nextEntry(ctx, w)
		switch {
		case errors.Is(err, ErrWatchClosed) && ctx.Err() == nil:
			return closed
		case err != nil:
			return err
		case e == nil:
			return nil // end of the initial values
		}
		if err := each(e); err != nil {
			return err
		}
	}
}

// queued makes the queued event: from the job's message, which stays in
// JOBS until its result is stored, or from the result. A job in neither
// place is unknown. It returns the result too, when the job finished
// between the two looks.
func (f *follower) queued(ctx context.Context, final *Result) (*Event, *Result, error) {
	ev := &Event{Type: EventQueued, ID: f.id}
	if final == nil && f.c.tenant != "" {
		// A tenant cannot read JOBS: a job without a result is taken as
		// queued (an unknown ID too), with no time.
		return ev, nil, nil
	}
	if final == nil {
		m, err := f.c.stores.Stream.GetLastMsgForSubject(ctx, fleet.SubjectPrefix+"*."+f.id)
		switch {
		case err == nil:
			ev.Time = m.Time.UTC()
			return ev, nil, nil
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			return nil, nil, fmt.Errorf("follow %s: look the job up: %w", f.id, err)
		}
		// It may have finished between the two looks.
		if final, err = f.c.Get(ctx, f.id); err != nil {
			return nil, nil, err
		}
	}
	if final.QueuedAt != nil {
		ev.Time = *final.QueuedAt
	}
	return ev, final, nil
}

// stream is the stream of the job's events: its tenant's (EventsStreamOf),
// made by the first worker that runs a job of the tenant's; until then
// there are no events to follow.
func (f *follower) stream() string { return fleet.EventsStreamOf(TenantOf(f.id)) }

// streamPoll is how often Follow looks for the events stream of a tenant
// whose first job no worker has taken yet.
const streamPoll = 100 * time.Millisecond

// untilStream calls open until it finds the stream of the job's events.
// A tenant's is made by the worker that takes the tenant's first job, so
// while the job has no result, its stream is waited for; once it has one
// (it ran without events), open's last error stands. A job of no tenant's
// has EVENTS or nothing, and a replay replays what is there: open's first
// error stands.
func (f *follower) untilStream(ctx context.Context, open func() error) error {
	for {
		err := open()
		if !errors.Is(err, jetstream.ErrStreamNotFound) || TenantOf(f.id) == "" || f.o.replayOnly {
			return err
		}
		if _, err := f.c.Get(ctx, f.id); err == nil {
			return open()
		}
		t := time.NewTimer(streamPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// openEvents binds the stream of the job's events; a fleet whose workers never created
// it has no events, and Follow yields queued and the result.
func (f *follower) openEvents(ctx context.Context) error {
	if f.c.tenant != "" {
		return nil // nothing to bind: lastSeq and consume say when there are no events
	}
	var st jetstream.Stream
	err := f.untilStream(ctx, func() (err error) {
		sctx, cancel := context.WithTimeout(ctx, eventsTimeout)
		defer cancel()
		st, err = f.c.js.Stream(sctx, f.stream())
		return err
	})
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("follow %s: read the events: %w", f.id, err)
	}
	f.events = st
	return nil
}

// lastSeq returns the sequence of the job's last event stored now, 0 when
// there is none.
func (f *follower) lastSeq(ctx context.Context) (uint64, error) {
	if f.c.tenant != "" {
		return f.tenantLastSeq(ctx)
	}
	if f.events == nil {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, eventsTimeout)
	defer cancel()
	m, err := f.events.GetLastMsgForSubject(ctx, fleet.EventSubject(f.id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("follow %s: %w", f.id, err)
	}
	return m.Sequence, nil
}

// consume delivers the job's events, from the first, on a channel,
// through an ephemeral pull consumer of its own (created with ctx, so that
// a fleet whose permissions refuse it fails fast instead of retrying).
// done is closed if the consumer stops before stop is called (it was
// deleted, or lost with its server). stop ends it, waits for its callback
// and deletes it.
func (f *follower) consume(ctx context.Context) (events <-chan jetstream.Msg, done <-chan struct{}, stop func(), err error) {
	if (f.c.tenant == "" && f.events == nil) || f.noEvents {
		return nil, nil, func() {}, nil
	}
	var cons jetstream.Consumer
	err = f.untilStream(ctx, func() (err error) {
		cctx, cancel := context.WithTimeout(ctx, eventsTimeout)
		defer cancel()
		// A consumer of one subject: its filter is in the API subject,
		// where a tenant's permissions see it.
		cons, err = f.c.js.CreateConsumer(cctx, f.stream(), jetstream.ConsumerConfig{
			FilterSubject:     fleet.EventSubject(f.id),
			DeliverPolicy:     jetstream.DeliverAllPolicy,
			AckPolicy:         jetstream.AckNonePolicy,
			InactiveThreshold: time.Minute, // removed by the server if stop never comes
			MemoryStorage:     true,
			Replicas:          1,
		})
		return err
	})
	if f.c.tenant != "" && errors.Is(err, jetstream.ErrStreamNotFound) {
		f.noEvents = true
		return nil, nil, func() {}, nil
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("follow %s: read the events: %w", f.id, err)
	}
	ch := make(chan jetstream.Msg, 64)
	quit := make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		// Blocking here holds the consumer back: it pulls no more than
		// the follower takes.
		select {
		case ch <- m:
		case <-quit:
		}
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("follow %s: read the events: %w", f.id, err)
	}
	stop = func() {
		close(quit)
		cc.Stop()
		<-cc.Closed()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = f.c.js.DeleteConsumer(dctx, f.stream(), cons.CachedInfo().Name)
	}
	return ch, cc.Closed(), stop, nil
}

// tenantLastSeq is lastSeq for a tenant: a direct get of the job's
// subject. A fleet without EVENTS, or whose EVENTS predates direct gets,
// has no responder: no events to wait for.
func (f *follower) tenantLastSeq(ctx context.Context) (uint64, error) {
	if f.noEvents {
		return 0, nil
	}
	m, err := f.c.directGet(ctx, f.stream(), fleet.EventSubject(f.id))
	switch {
	case errors.Is(err, errNoMessage):
		return 0, nil
	case errors.Is(err, nats.ErrNoResponders):
		// No direct-get responder (yet: a server sets it up a moment
		// after the stream allows direct gets): the last event is not
		// known, so Follow reads on to the job's finished event, or until
		// nothing more comes for catchUpIdle.
		return math.MaxUint64, nil
	case err != nil:
		return 0, fmt.Errorf("follow %s: the last event: %w", f.id, err)
	}
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("follow %s: the last event: bad sequence %q", f.id, m.Header.Get(jetstream.SequenceHeader))
	}
	return seq, nil
}

func finishedAt(r *Result) time.Time {
	if r.FinishedAt != nil {
		return *r.FinishedAt
	}
	return time.Time{}
}
