package jobs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
)

// The stream of a followed job's events, and how Follow reads it.

// eventsTimeout bounds each call Follow makes about the stream EVENTS: a
// fleet whose permissions predate it does not answer them.
const eventsTimeout = 5 * time.Second

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

// openEvents binds the stream of the job's events, as the client's
// access does; a fleet whose workers never created it has no events, and
// Follow yields queued and the result.
func (f *follower) openEvents(ctx context.Context) error { return f.c.acc.openEvents(ctx, f) }

// openEvents binds nothing for a tenant: lastSeq and consume say when
// there are no events.
func (a *tenantAccess) openEvents(context.Context, *follower) error { return nil }

func (a *fleetAccess) openEvents(ctx context.Context, f *follower) error {
	var st jetstream.Stream
	err := f.untilStream(ctx, func() (err error) {
		sctx, cancel := context.WithTimeout(ctx, eventsTimeout)
		defer cancel()
		st, err = f.c.js.Stream(sctx, f.stream())
		return err
	})
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		f.noEvents = true
		return nil
	case err != nil:
		return fmt.Errorf("follow %s: read the events: %w", f.id, err)
	}
	f.events = st
	return nil
}

// lastSeq returns the sequence of the job's last event stored now, 0 when
// there is none.
func (f *follower) lastSeq(ctx context.Context) (uint64, error) { return f.c.acc.lastSeq(ctx, f) }

func (a *fleetAccess) lastSeq(ctx context.Context, f *follower) (uint64, error) {
	if f.noEvents {
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
	if f.noEvents {
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
	if f.events == nil && errors.Is(err, jetstream.ErrStreamNotFound) {
		// Found missing here by a client that binds no stream (a
		// tenant's): the fleet has no EVENTS.
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

// lastSeq is follower.lastSeq for a tenant: a direct get of the job's
// subject. A fleet without EVENTS, or whose EVENTS predates direct gets,
// has no responder: no events to wait for.
func (a *tenantAccess) lastSeq(ctx context.Context, f *follower) (uint64, error) {
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
