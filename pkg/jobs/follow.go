package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

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
// as EVENTS still keeps them (the fleet's events max age, 1h by default), then its result.
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
		if !c.acc.reaches(TenantOf(id)) {
			yield(nil, fmt.Errorf("%w: %s (not tenant %s's)", ErrNotFound, shorten.Text(id, 140), c.Tenant()))
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
	events   jetstream.Stream // bound by the fleet's client when EVENTS exists
	noEvents bool             // the fleet has no EVENTS
}

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

// queued makes the queued event: from the result, or, for a job with
// none yet, as the client's access tells (fleetAccess.queued,
// tenantAccess.queued). It returns the result too, when the job finished
// between the two looks.
func (f *follower) queued(ctx context.Context, final *Result) (*Event, *Result, error) {
	ev := &Event{Type: EventQueued, ID: f.id}
	if final == nil {
		r, err := f.c.acc.queued(ctx, f, ev)
		if err != nil {
			return nil, nil, err
		}
		if r == nil {
			return ev, nil, nil
		}
		final = r
	}
	if final.QueuedAt != nil {
		ev.Time = *final.QueuedAt
	}
	return ev, final, nil
}

// queued for the fleet's client: the job's message, which stays in JOBS
// until its result is stored, gives the time; a job in neither place is
// unknown.
func (a *fleetAccess) queued(ctx context.Context, f *follower, ev *Event) (*Result, error) {
	m, err := a.st.Stream.GetLastMsgForSubject(ctx, fleet.SubjectPrefix+"*."+f.id)
	switch {
	case err == nil:
		ev.Time = m.Time.UTC()
		return nil, nil
	case !errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, fmt.Errorf("follow %s: look the job up: %w", f.id, err)
	}
	// It may have finished between the two looks.
	return a.get(ctx, f.id)
}

// queued for a tenant, who cannot read JOBS: a job without a result is
// taken as queued (an unknown ID too), with no time.
func (a *tenantAccess) queued(context.Context, *follower, *Event) (*Result, error) { return nil, nil }

func finishedAt(r *Result) time.Time {
	if r.FinishedAt != nil {
		return *r.FinishedAt
	}
	return time.Time{}
}
