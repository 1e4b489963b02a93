package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

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
	msg, err := c.stores.Stream.GetLastMsgForSubject(ctx, SubjectPrefix+"*."+id)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return "", fmt.Errorf("look up %s: %w", id, err)
	}
	queue, _, err := ParseSubject(msg.Subject)
	if err != nil {
		return PhaseQueued, nil
	}
	cons, err := c.stores.Stream.Consumer(ctx, ConsumerName(queue))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return PhaseQueued, nil // no worker has served this queue yet
	}
	if err != nil {
		return "", fmt.Errorf("look up %s: %w", id, err)
	}
	// Consumer returns the info it fetched: no second round trip.
	// A work-queue consumer delivers in stream order, so a message at or
	// below the last delivered sequence has been handed to a worker.
	if msg.Sequence <= cons.CachedInfo().Delivered.Stream {
		return PhaseRunning, nil
	}
	return PhaseQueued, nil
}
