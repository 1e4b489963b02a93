package gateway

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// Open returns a client of the fleet on js, retrying every second while
// NATS or JetStream is not ready (a gateway may start before them), until
// ctx ends. The gateway creates only what is missing of the topology: the
// workers own its settings.
func Open(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*jobs.Client, error) {
	for attempt := 1; ; attempt++ {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := jobs.NewClient(octx, js, jobs.Config{})
		cancel()
		if err == nil {
			return c, nil
		}
		if attempt == 1 || attempt%30 == 0 {
			log.Warn("the fleet's JetStream topology is not reachable yet; retrying", "err", err, "attempt", attempt)
		}
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
