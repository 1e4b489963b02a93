package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// The job index (pkg/jobs index.go) is what the console lists. The worker
// writes it: a job's spec when it takes the job, its running summary once
// the job has run for indexRunningDelay, its finished summary when the
// result is stored. Like the events, it must
// never slow a job down: records are queued, without blocking, into a
// bounded queue that one goroutine of the worker publishes, pipelined;
// what does not fit is dropped and counted. RESULTS stays the authority,
// and a reader checks a running record against it.
const (
	// indexQueueMax bounds the records queued: at a few hundred bytes
	// each (a spec at most ~40 KiB), a few MiB.
	indexQueueMax = 4096
	// indexBatch is the most records published before their acks are
	// awaited.
	indexBatch = 256
	// indexAckWait bounds the wait for a batch's acks.
	indexAckWait = 5 * time.Second
	// indexDrainWait is how long a stopping worker publishes what is left.
	indexDrainWait = 2 * time.Second
)

// indexSink is the one call the index needs of the worker's JetStream.
type indexSink interface {
	PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error)
}

var _ indexSink = jetstream.JetStream(nil)

// indexer publishes index records. A nil *indexer publishes nothing.
type indexer struct {
	sink    indexSink
	queue   chan *nats.Msg
	dropped atomic.Int64
	log     *slog.Logger
}

func newIndexer(sink indexSink, log *slog.Logger) *indexer {
	return &indexer{sink: sink, queue: make(chan *nats.Msg, indexQueueMax), log: log}
}

// add queues a record; a full queue drops it.
func (x *indexer) add(subject string, v any) {
	if x == nil {
		return
	}
	data, err := json.Marshal(v)
	if err != nil {
		return
	}
	select {
	case x.queue <- &nats.Msg{Subject: subject, Data: data}:
	default:
		if x.dropped.Add(1)%1000 == 1 {
			x.log.Warn("job index records dropped: the broker is behind", "dropped", x.dropped.Load())
		}
	}
}

// indexRunningDelay is how long a job runs before its running record is
// written: a job that ends sooner has its finished record only, which
// would have replaced the running one at once (a stored message, and a
// third of the index's cost per job, saved for the many short jobs).
const indexRunningDelay = 250 * time.Millisecond

// running records that this worker took m's job, a valid one (its
// attempt-th delivery):
// the spec now, the running summary once the job has run for
// indexRunningDelay. The caller ends the returned run before it records
// the job's end, and in any case once it is done with the job.
func (x *indexer) running(m *message, worker string) *indexRun {
	if x == nil || !m.indexed {
		return nil
	}
	job := m.job // valid: its ID and queue are the index's
	x.add(fleet.IndexSpecSubject(job.ID), records.NewJobSpec(job))
	r, taken := &indexRun{}, time.Now().UTC()
	r.timer = time.AfterFunc(indexRunningDelay, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.ended {
			s := records.RunningSummary(job, worker, m.attempt, m.queuedAt)
			s.StartedAt = &taken
			x.add(s.Subject(), s)
		}
	})
	return r
}

// indexRun is a job's running record still to be written.
type indexRun struct {
	mu    sync.Mutex
	ended bool
	timer *time.Timer
}

// end cancels the running record if it is not written yet; one written
// is queued before anything added after end returns, so that the
// finished record replaces it. A nil run has nothing to end.
func (r *indexRun) end() {
	if r == nil {
		return
	}
	r.timer.Stop()
	r.mu.Lock()
	r.ended = true
	r.mu.Unlock()
}

// finished records the result stored for m's job (under m's ID); dead
// marks a dead letter.
func (x *indexer) finished(m *message, stored *jobs.Result, dead bool) {
	if x == nil || !m.indexed {
		return
	}
	s := records.FinishedSummary(m.queue, m.job, stored)
	s.DeadLetter = dead
	x.add(s.Subject(), s)
	if dead {
		x.add(fleet.IndexDeadSubject(s.ID), s)
	}
}

// run publishes until ctx ends, then what is queued for indexDrainWait.
func (x *indexer) run(ctx context.Context) {
	batch := make([]*nats.Msg, 0, indexBatch)
	for {
		select {
		case m := <-x.queue:
			batch = append(batch[:0], m)
			batch = x.fill(batch)
			x.publish(batch)
		case <-ctx.Done():
			deadline := time.Now().Add(indexDrainWait)
			for len(x.queue) > 0 && time.Now().Before(deadline) {
				x.publish(x.fill(batch[:0]))
			}
			if n := len(x.queue); n > 0 {
				x.log.Warn("job index records left unpublished at stop", "records", n)
			}
			return
		}
	}
}

// fill appends what is queued, up to indexBatch.
func (x *indexer) fill(batch []*nats.Msg) []*nats.Msg {
	for len(batch) < indexBatch {
		select {
		case m := <-x.queue:
			batch = append(batch, m)
		default:
			return batch
		}
	}
	return batch
}

// publish sends a batch without waiting between records, then waits for
// their acks; a record refused or unacknowledged counts as dropped.
func (x *indexer) publish(batch []*nats.Msg) {
	futures := make([]jetstream.PubAckFuture, 0, len(batch))
	lost := 0
	for _, m := range batch {
		f, err := x.sink.PublishMsgAsync(m, jetstream.WithExpectStream(fleet.IndexStreamName))
		if err != nil {
			lost++
			continue
		}
		futures = append(futures, f)
	}
	t := time.NewTimer(indexAckWait)
	defer t.Stop()
	for i, f := range futures {
		select {
		case <-f.Ok():
		case <-f.Err():
			lost++
		case <-t.C:
			lost += len(futures) - i
			x.count(lost)
			return
		}
	}
	x.count(lost)
}

func (x *indexer) count(lost int) {
	if lost == 0 {
		return
	}
	if n := x.dropped.Add(int64(lost)); n == int64(lost) || n%1000 < int64(lost) {
		x.log.Warn("job index records not stored", "dropped", n)
	}
}
