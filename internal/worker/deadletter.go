package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// AdvisorySubject is the subject of the server's advisory for a job of this
// queue given up after MaxDeliver deliveries.
func AdvisorySubject(queue string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + fleet.StreamName + "." + fleet.ConsumerName(queue)
}

// maxDeliverAdvisory is the part of the server's
// io.nats.jetstream.advisory.v1.max_deliver advisory the worker reads.
type maxDeliverAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// subscribeDeadLetters subscribes to the advisories of every lane's queue
// and handles them in a goroutine that wg owns, until ctx is done. Run
// calls it before the first fetch; NATS re-subscribes after a reconnect.
func (w *Worker) subscribeDeadLetters(ctx context.Context, wg *sync.WaitGroup) (unsubscribe func(), err error) {
	ch := make(chan *nats.Msg, 256)
	var subs []*nats.Subscription
	unsubscribe = func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}
	consumers := map[string]bool{}
	for _, l := range w.lanes {
		sub, err := w.js.Conn().ChanSubscribe(AdvisorySubject(l.Queue), ch)
		if err != nil {
			unsubscribe()
			return nil, fmt.Errorf("subscribe to %s: %w", AdvisorySubject(l.Queue), err)
		}
		subs = append(subs, sub)
		consumers[fleet.ConsumerName(l.Queue)] = true
	}
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-ch:
				var adv maxDeliverAdvisory
				if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 ||
					adv.Stream != fleet.StreamName || !consumers[adv.Consumer] {
					w.log.Warn("ignoring a malformed max-deliveries advisory", "data", string(m.Data))
					continue
				}
				w.deadLetter(ctx, adv.StreamSeq, int(adv.Deliveries), "advisory")
			}
		}
	})
	return unsubscribe, nil
}

// sweepDeadLetters runs sweepLane for every lane, and returns how many
// jobs it finalized.
func (w *Worker) sweepDeadLetters(ctx context.Context) (int, error) {
	total := 0
	var errs []error
	for _, l := range w.lanes {
		n, err := w.sweepLane(ctx, l)
		total += n
		if err != nil {
			errs = append(errs, fmt.Errorf("queue %s: %w", l.Queue, err))
		}
	}
	return total, errors.Join(errs...)
}

// sweepLane finalizes the jobs of lane l's queue that its consumer has
// delivered and given up without an advisory being handled. It acts only
// when the consumer has no message pending an ack: then every message of
// the queue still in the stream at or below the consumer's delivered
// sequence was given up (acked and termed ones are gone with WorkQueue
// retention), and none can become pending again. It returns how many it
// finalized.
func (w *Worker) sweepLane(ctx context.Context, l *lane) (int, error) {
	info, err := l.cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("consumer info: %w", err)
	}
	if info.NumAckPending > 0 || info.Delivered.Stream == 0 {
		return 0, nil
	}
	last := info.Delivered.Stream
	filter := fleet.SubjectPrefix + l.Queue + ".>"
	n := 0
	for seq := uint64(1); seq <= last; {
		m, err := w.stores.Stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("read stream at %d: %w", seq, err)
		}
		if m.Sequence > last {
			return n, nil
		}
		if w.deadLetter(ctx, m.Sequence, info.Config.MaxDeliver, "sweep") {
			n++
		}
		seq = m.Sequence + 1
	}
	return n, nil
}

// sweepLoop sweeps at start and every SweepInterval until ctx is done.
func (w *Worker) sweepLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.SweepInterval)
	defer t.Stop()
	for {
		if n, err := w.sweepDeadLetters(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("dead-letter sweep", "err", err)
		} else if n > 0 {
			w.log.Warn("dead-letter sweep finalized jobs given up without a handled advisory", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// deadLetter finalizes the job at stream sequence seq, given up after
// deliveries deliveries. It reports whether this call removed the message.
func (w *Worker) deadLetter(ctx context.Context, seq uint64, deliveries int, via string) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	log := w.log.With("stream_seq", seq, "via", via)
	m, err := w.stores.Stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		log.Debug("dead letter already removed")
		return false
	}
	if err != nil {
		log.Warn("read dead letter; the sweep will retry", "err", err)
		return false
	}
	reason := fmt.Sprintf("gave up after %d deliveries (MaxDeliver): no worker finished the job", deliveries)
	stored, removed := w.finalize(ctx, m, deliveries, jobs.StatusError, reason, log)
	if !removed {
		return false
	}
	w.obs.DeadLettered()
	if stored != nil {
		log.Warn("job given up", "job_id", stored.ID, "status", string(stored.Status), "reason", stored.Error)
	} else {
		log.Warn("removed a given-up message with an invalid subject", "subject", m.Subject)
	}
	return true
}

// finalize ends the job of stream message m without running it: it
// stores a result of this status (Create: first writer wins, so a result
// already stored, by a worker or a cancel, stays), deletes the message,
// and, only when this call deleted it, publishes the stored result to
// reply_to. Every worker may race to finalize the same message; one wins.
// It returns the stored result (nil for a subject that is not
// jobs.<queue>.<id>) and whether this call removed the message.
func (w *Worker) finalize(ctx context.Context, m *jetstream.RawStreamMsg, attempt int, status jobs.Status, reason string, log *slog.Logger) (*jobs.Result, bool) {
	t := m.Time.UTC()
	msg := w.check(m.Subject, m.Data, attempt, &t) // best effort: for reply_to and labels
	log = log.With("job_id", msg.id, "attempt", attempt)

	var stored *jobs.Result
	if msg.keyed {
		now := time.Now().UTC()
		res := &jobs.Result{Status: status, Error: reason, FinishedAt: &now}
		w.fill(res, msg)
		var won bool
		var err error
		stored, won, err = records.StoreResult(ctx, w.stores.Results, res, w.stores.MaxResultBytes)
		if err != nil {
			// Keep the message: without a result, deleting it would lose the job.
			log.Warn("store the result of a job ended unrun; keeping its message", "status", string(status), "err", err)
			return nil, false
		}
		if won {
			// Workers race to finalize a message: the winner records it.
			w.finished(msg, stored, true, status == jobs.StatusError)
		}
	}
	if err := w.stores.Stream.DeleteMsg(ctx, m.Sequence); err != nil {
		if _, gerr := w.stores.Stream.GetMsg(ctx, m.Sequence); errors.Is(gerr, jetstream.ErrMsgNotFound) {
			return stored, false // another worker removed it and replied
		}
		log.Warn("remove the message of a job ended unrun", "status", string(status), "err", err)
		return stored, false
	}
	if stored != nil {
		w.reply(msg, stored, log)
	}
	return stored, true
}
