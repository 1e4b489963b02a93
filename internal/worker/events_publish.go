package worker

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// The publishing side of a job's events (events.go queues them): one
// goroutine per delivery takes what is queued and publishes it in order.

func (e *jobEvents) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// take empties the queue, gaps included, and returns what it held.
func (e *jobEvents) take() []*queuedEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gapsLocked()
	q := e.queue
	e.queue, e.queuedB, e.oldest, e.urgent = nil, 0, time.Time{}, false
	return q
}

// due returns how long to wait before publishing: 0 for now, -1 when
// nothing is queued.
func (e *jobEvents) due() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case len(e.queue) == 0 && e.out[0].lost == 0 && e.out[1].lost == 0:
		return -1
	case e.urgent || e.oldest.IsZero():
		return 0
	}
	return max(time.Until(e.oldest.Add(eventInterval)), 0)
}

// loop is the publishing goroutine.
func (e *jobEvents) loop() {
	defer close(e.exited)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d := e.due()
		if d == 0 {
			e.publish(e.take())
			continue
		}
		var tick <-chan time.Time
		if d > 0 {
			timer.Reset(d)
			tick = timer.C
		}
		select {
		case <-e.wake:
		case <-tick:
		case done := <-e.flushC:
			e.publish(e.take())
			close(done)
		case <-e.stop:
			// Twice at most: output that fails comes back as a gap, and a
			// gap that fails is dropped.
			for q := e.take(); len(q) > 0 && e.ctx.Err() == nil; q = e.take() {
				e.publish(q)
			}
			return
		case <-e.ctx.Done():
			return
		}
		timer.Stop()
	}
}

// publish publishes events in order. Output whose publish fails is
// published again as a gap; other events are logged and dropped. Once the
// result has waited for the events in vain (hurry), output left to publish
// goes out as gaps: the broker is behind, and the gaps and the finished
// event are what a watcher needs.
func (e *jobEvents) publish(q []*queuedEvent) {
	var failed []*queuedEvent
	var skipped [2]*jobs.Event // output passed over in a hurry, as gaps
	passOver := func() {
		for i, g := range skipped {
			if g != nil {
				e.publishOne(g, nil)
				skipped[i] = nil
			}
		}
	}
	for _, it := range q {
		if e.ctx.Err() != nil {
			return
		}
		if it.ev.Type == jobs.EventOutput && e.hurry.Load() {
			i, n := streamIndex(it.ev.Stream), int64(len(it.data))
			if g := skipped[i]; g != nil && g.Offset+g.Bytes == it.ev.Offset {
				g.Bytes += n
				continue
			}
			passOver()
			skipped[i] = &jobs.Event{Type: jobs.EventGap, ID: it.ev.ID, Attempt: it.ev.Attempt, Time: it.ev.Time,
				Stream: it.ev.Stream, Offset: it.ev.Offset, Bytes: n}
			continue
		}
		passOver()
		if !e.publishOne(&it.ev, it) && it.ev.Type == jobs.EventOutput && e.ctx.Err() == nil {
			failed = append(failed, it)
		}
	}
	passOver()
	if len(failed) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, it := range failed {
		e.queueLocked(&queuedEvent{ev: jobs.Event{Type: jobs.EventGap, Stream: it.ev.Stream, Offset: it.ev.Offset, Bytes: int64(len(it.data))}}, false)
	}
}

// publishOne publishes one event (it, when not nil, is the queued event it
// comes from) and reports whether it was stored, or needs not be.
func (e *jobEvents) publishOne(ev *jobs.Event, it *queuedEvent) bool {
	out, ok := e.share(ev, it)
	if !ok {
		return true
	}
	data, err := records.MarshalEvent(&out)
	if err != nil {
		e.log.Warn("encode job event", "type", string(out.Type), "err", err)
		return true
	}
	if out.Type == jobs.EventOutput || out.Type == jobs.EventGap {
		if int64(len(data)) > e.budget {
			// The run has had its share of the stream.
			e.overShare[streamIndex(out.Stream)] = true
			out = jobs.Event{Type: jobs.EventOutputTruncated, ID: out.ID, Attempt: out.Attempt, Time: out.Time, Stream: out.Stream, Offset: out.Offset}
			if data, err = records.MarshalEvent(&out); err != nil {
				return true
			}
		} else {
			e.budget -= int64(len(data))
		}
	}
	if out.Type == jobs.EventFinished {
		// The last event: its ack would only hold up the settling of
		// the message (a round trip), and a follower ends on the
		// result without it.
		if err := e.sink.PublishNoAck(&nats.Msg{Subject: e.subject, Data: data}); err != nil {
			e.log.Debug("publish job event", "type", string(out.Type), "err", err)
		}
		return true
	}
	ctx, cancel := context.WithTimeout(e.ctx, eventPublishTimeout)
	defer cancel()
	if _, err := e.sink.PublishMsg(ctx, &nats.Msg{Subject: e.subject, Data: data}); err != nil {
		e.log.Debug("publish job event", "type", string(out.Type), "err", err)
		return false
	}
	return true
}

// share returns the event to publish for ev, and false when nothing is to
// be published: the run's output already went past its budget.
func (e *jobEvents) share(ev *jobs.Event, it *queuedEvent) (jobs.Event, bool) {
	out := *ev
	i := streamIndex(out.Stream)
	switch out.Type {
	case jobs.EventStarted:
		e.budget, e.overShare = it.budget, [2]bool{}
	case jobs.EventOutput:
		if e.overShare[i] {
			return out, false
		}
		out.SetData(it.data)
	case jobs.EventGap, jobs.EventOutputTruncated:
		if e.overShare[i] {
			return out, false // output_truncated said so already
		}
	}
	return out, true
}
