package records

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// StoreResult creates RESULTS[r.ID] unless it exists: the first writer wins.
// It returns the stored result (r, or the winner's) and whether r won.
//
// The result is shortened in place to fit maxBytes first (see EncodeResult).
func StoreResult(ctx context.Context, kv jetstream.KeyValue, r *jobs.Result, maxBytes int) (stored *jobs.Result, won bool, err error) {
	data, err := EncodeResult(r, maxBytes)
	if err != nil {
		return nil, false, err
	}
	winner, won, err := fleet.CreateFirst(ctx, kv, r.ID, data)
	if err != nil {
		return nil, false, err
	}
	if won {
		return r, true, nil
	}
	w, err := jobs.DecodeStoredResult(r.ID, winner)
	if err != nil {
		return nil, false, err
	}
	return w, false, nil
}
