package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/shorten"
)

// Phase is where a job without a result is: queued or running.
type Phase string

const (
	// PhaseQueued: in the stream, not yet delivered to a worker.
	PhaseQueued Phase = "queued"
	// PhaseRunning: delivered to a worker at least once and not yet
	// acknowledged. A job handed back for redelivery stays running.
	PhaseRunning Phase = "running"
)

// Phase reports whether a job still in the stream has been delivered. It
// returns ErrNotFound when the stream has no job with this ID: it finished
// (see Get), or never was. The answer comes from the stream and the
// queue's consumer, so any client sees the same as the fleet.
func (c *Client) Phase(ctx context.Context, id string) (Phase, error) {
	if !ValidID(id) {
		return "", fmt.Errorf("%w: %s", ErrNotFound, shorten.Text(id, 140))
	}
	_, phase, err := c.inStream(ctx, id)
	return phase, err
}

// PendingJob returns a job that is still in the stream, as it was
// published, and its phase; ErrNotFound once it has finished (its message
// is gone: the index keeps its spec) or for an unknown ID.
func (c *Client) PendingJob(ctx context.Context, id string) (*Job, Phase, error) {
	if !ValidID(id) {
		return nil, "", fmt.Errorf("%w: %s", ErrNotFound, shorten.Text(id, 140))
	}
	msg, phase, err := c.inStream(ctx, id)
	if err != nil {
		return nil, "", err
	}
	queue, mid, err := fleet.ParseSubject(msg.Subject)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	job, err := Decode(msg.Data, 0)
	if err != nil {
		return nil, "", fmt.Errorf("job %s in the stream: %w", id, err)
	}
	job.ID, job.Queue = mid, queue
	return job, phase, nil
}

// inStream reads a job's message and its phase.
func (c *Client) inStream(ctx context.Context, id string) (*jetstream.RawStreamMsg, Phase, error) {
	st, err := c.acc.stores()
	if err != nil {
		return nil, "", fmt.Errorf("phase: %w", err)
	}
	msg, err := st.Stream.GetLastMsgForSubject(ctx, fleet.SubjectPrefix+"*."+id)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, "", fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, "", fmt.Errorf("look up %s: %w", id, err)
	}
	phase, err := phaseOf(ctx, st.Stream, msg)
	return msg, phase, err
}

func phaseOf(ctx context.Context, stream jetstream.Stream, msg *jetstream.RawStreamMsg) (Phase, error) {
	queue, _, err := fleet.ParseSubject(msg.Subject)
	if err != nil {
		return PhaseQueued, nil
	}
	cons, err := stream.Consumer(ctx, fleet.ConsumerName(queue))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return PhaseQueued, nil // no worker has served this queue yet
	}
	if err != nil {
		return "", fmt.Errorf("look up %s: %w", msg.Subject, err)
	}
	// Consumer returns the info it fetched: no second round trip.
	// A work-queue consumer delivers in stream order, so a message at or
	// below the last delivered sequence has been handed to a worker.
	if msg.Sequence <= cons.CachedInfo().Delivered.Stream {
		return PhaseRunning, nil
	}
	return PhaseQueued, nil
}
