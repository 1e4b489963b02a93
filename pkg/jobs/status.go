package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
)

// FleetStatus is what `submit status` shows: the live workers, from their
// heartbeats in WORKERS, and each queue's backlog, from its consumer.
type FleetStatus struct {
	Workers []WorkerStatus `json:"workers"`
	Queues  []QueueStatus  `json:"queues"`
	// Messages and Bytes are the whole JOBS stream: every queued or running
	// job, including those of queues no worker has served yet.
	Messages uint64 `json:"stream_messages"`
	Bytes    uint64 `json:"stream_bytes"`
}

// QueueStatus is a queue's backlog as its consumer workers-<queue> sees it.
type QueueStatus struct {
	Queue string `json:"queue"`
	// Pending jobs are queued, not yet delivered to a worker.
	Pending uint64 `json:"pending"`
	// InFlight jobs are delivered and not yet acknowledged: running, or
	// held by a worker whose lease has not expired yet.
	InFlight int `json:"in_flight"`
	// Redelivered counts jobs in flight that were delivered more than once.
	Redelivered int `json:"redelivered"`
	// Waiting is the number of open pull requests: idle worker slots.
	Waiting int `json:"waiting_pulls"`
	// Oldest is when the oldest job of the queue still in the stream
	// (queued or in flight) was queued; nil when there is none.
	Oldest *time.Time `json:"oldest_queued_at,omitempty"`
}

// Status reads the fleet's status. Workers are sorted by ID, queues by name.
// A heartbeat that cannot be decoded is skipped rather than failing the call:
// the bucket is written by every worker version of the fleet.
func (c *Client) Status(ctx context.Context) (*FleetStatus, error) {
	st, err := c.acc.stores()
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	fs := &FleetStatus{Workers: []WorkerStatus{}, Queues: []QueueStatus{}}
	// Which workers have a heartbeat, from the stream's state, then each
	// one's: a watch of the bucket, whose end of initial values the
	// workers' own heartbeats can bring early, left workers out.
	ids, err := kvKeys(ctx, c.js, fleet.WorkersBucket)
	if err != nil {
		return nil, fmt.Errorf("read workers: %w", err)
	}
	for _, id := range ids {
		e, err := st.Workers.Get(ctx, id)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
			continue // stopped or expired meanwhile
		case err != nil:
			return nil, fmt.Errorf("read workers: %w", err)
		}
		var ws WorkerStatus
		if json.Unmarshal(e.Value(), &ws) != nil {
			continue
		}
		if ws.ID == "" {
			ws.ID = e.Key()
		}
		fs.Workers = append(fs.Workers, ws)
	}
	slices.SortFunc(fs.Workers, func(a, b WorkerStatus) int { return strings.Compare(a.ID, b.ID) })

	info, err := st.Stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", fleet.StreamName, err)
	}
	fs.Messages, fs.Bytes = info.State.Msgs, info.State.Bytes
	cl := st.Stream.ListConsumers(ctx)
	for ci := range cl.Info() {
		queue, ok := strings.CutPrefix(ci.Name, fleet.ConsumerName(""))
		if !ok || !ValidQueue(queue) {
			continue
		}
		fs.Queues = append(fs.Queues, QueueStatus{
			Queue:       queue,
			Pending:     ci.NumPending,
			InFlight:    ci.NumAckPending,
			Redelivered: ci.NumRedelivered,
			Waiting:     ci.NumWaiting,
		})
		if ci.NumPending+uint64(ci.NumAckPending) > 0 {
			// The first message of the queue at or after sequence 1: one
			// lookup in the stream's subject index.
			m, err := st.Stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(fleet.SubjectPrefix+queue+".>"))
			if err == nil {
				t := m.Time.UTC()
				fs.Queues[len(fs.Queues)-1].Oldest = &t
			} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
				return nil, fmt.Errorf("oldest job of %s: %w", queue, err)
			}
		}
	}
	if err := cl.Err(); err != nil {
		return nil, fmt.Errorf("list consumers: %w", err)
	}
	slices.SortFunc(fs.Queues, func(a, b QueueStatus) int { return strings.Compare(a.Queue, b.Queue) })
	return fs, nil
}

// kvKeys returns the keys of a bucket that have a message, from its
// stream's state (a key whose last message is a delete marker included):
// exact at the moment the server answers, where a KV key listing is a
// watch that concurrent writes can end early.
func kvKeys(ctx context.Context, js jetstream.JetStream, bucket string) ([]string, error) {
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, err
	}
	prefix := kvSubject(bucket, "")
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		keys = append(keys, strings.TrimPrefix(subj, prefix))
	}
	slices.Sort(keys)
	return keys, nil
}

// WorkerStatus is a worker's heartbeat, stored in WORKERS under its ID and
// refreshed every WorkerTTL/3; a worker gone silent expires with the TTL.
type WorkerStatus struct {
	ID        string    `json:"id"`
	Queue     string    `json:"queue"`            // the heaviest of Queues
	Queues    []string  `json:"queues,omitempty"` // the lanes served, "name:weight", heaviest first
	Version   string    `json:"version"`
	Slots     int       `json:"slots"`
	Busy      int       `json:"busy"`
	Ready     bool      `json:"ready"`              // false while the executor is down
	Draining  bool      `json:"draining,omitempty"` // no longer fetching
	LastError string    `json:"last_error,omitempty"`
	StartedAt time.Time `json:"started_at"`
	LastSeen  time.Time `json:"last_seen"`
	// Pool is the executor's warm pool, when it has one.
	Pool *PoolStatus `json:"pool,omitempty"`
}

// PoolStatus is a worker's warm pool: sandboxes started ahead of their
// jobs (internal/executor).
type PoolStatus struct {
	Size int `json:"size"` // the target per preset image
	Idle int `json:"idle"` // warm sandboxes ready now, all images
	// Templates are the templates' own warm sandboxes ready now, their
	// start and ready run (apart from Idle).
	Templates int   `json:"templates,omitempty"`
	Hits      int64 `json:"hits"`   // jobs that took a warm sandbox
	Misses    int64 `json:"misses"` // jobs that could have, found none and started one
	// Halted: the pool does not refill, because sandboxes do not start.
	Halted bool `json:"halted,omitempty"`
}
