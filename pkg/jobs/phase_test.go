package jobs_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// A job is queued until a worker's consumer delivers it, running until
// acknowledged, and not found once it has left the stream.
func TestPhase(t *testing.T) {
	t.Parallel()
	c, js := setup(t, fleet.Topology{})
	ctx := t.Context()
	if _, err := c.Phase(ctx, "nobody"); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("unknown job: %v, want ErrNotFound", err)
	}
	id, err := c.Submit(ctx, &jobs.Job{Image: "python", Code: "print(1)"})
	if err != nil {
		t.Fatal(err)
	}
	check := func(want jobs.Phase) {
		t.Helper()
		got, err := c.Phase(ctx, id)
		if err != nil || got != want {
			t.Fatalf("Phase = %q, %v; want %q", got, err, want)
		}
	}
	check(jobs.PhaseQueued) // no consumer yet
	cons, err := fleet.Topology{}.EnsureConsumer(ctx, js, jobs.DefaultQueue)
	if err != nil {
		t.Fatal(err)
	}
	check(jobs.PhaseQueued) // a consumer, nothing delivered
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	msg := <-batch.Messages()
	if msg == nil {
		t.Fatal("no message delivered")
	}
	check(jobs.PhaseRunning)
	if err := msg.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Phase(ctx, id); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("acknowledged job: %v, want ErrNotFound", err)
	}
}
