package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/shorten"
)

// ErrWatchClosed: a watch on RESULTS ended without its reader stopping it
// or its context ending (the server or the connection went away).
var ErrWatchClosed = errors.New("result watch closed")

// ResultsWatch delivers the results stored in RESULTS after it was opened
// (WatchResults), in the order they were stored: every job's, or those of
// the IDs it was opened for. Stop it when done.
type ResultsWatch struct {
	w jetstream.KeyWatcher
}

// StoredResult is a result as a ResultsWatch delivers it: still encoded,
// so that a reader of every job's results decodes only the ones it wants.
type StoredResult struct {
	ID   string // the job's ID: the key the result is stored under
	Data []byte // the result as stored
}

// Decode parses the result (DecodeStoredResult).
func (s StoredResult) Decode() (*Result, error) { return DecodeStoredResult(s.ID, s.Data) }

// WatchResults opens a watch on the results stored from now on: of the
// jobs ids, or of every job when ids is empty. Results stored before are
// not delivered: open the watch first, then look up (Get) or publish, and
// each result is either found or delivered. One watch of a whole batch
// costs the server one consumer instead of one per job. A tenant's client
// cannot watch RESULTS this way (ErrNotTenants); Watch watches one job.
func (c *Client) WatchResults(ctx context.Context, ids ...string) (*ResultsWatch, error) {
	if c.tenant != "" {
		return nil, fmt.Errorf("watch results: %w", ErrNotTenants)
	}
	for _, id := range ids {
		if !ValidID(id) {
			return nil, invalid("id %q must match [A-Za-z0-9_-]{1,128}", shorten.Text(id, 140))
		}
	}
	// WatchFiltered writes the bucket's prefix into the slice it is given.
	w, err := c.stores.Results.WatchFiltered(ctx, slices.Clone(ids), jetstream.UpdatesOnly())
	if err != nil {
		return nil, fmt.Errorf("watch results: %w", err)
	}
	return &ResultsWatch{w: w}, nil
}

// Next blocks until the next result is stored, and returns it. It returns
// ctx's error when ctx is done first, and ErrWatchClosed when the watch
// ended.
func (rw *ResultsWatch) Next(ctx context.Context) (StoredResult, error) {
	e, err := nextPut(ctx, rw.w)
	if err != nil {
		return StoredResult{}, err
	}
	return StoredResult{ID: e.Key(), Data: e.Value()}, nil
}

// Stop closes the watch.
func (rw *ResultsWatch) Stop() error { return rw.w.Stop() }

// nextPut returns the next value stored under a key w watches, skipping
// the end of the initial values.
func nextPut(ctx context.Context, w jetstream.KeyWatcher) (jetstream.KeyValueEntry, error) {
	for {
		if e, err := nextEntry(ctx, w); err != nil || e != nil {
			return e, err
		}
	}
}

// nextEntry returns the next value stored under a key w watches, or nil
// at the end of the initial values, skipping deleted or expired keys.
func nextEntry(ctx context.Context, w jetstream.KeyWatcher) (jetstream.KeyValueEntry, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				return nil, ErrWatchClosed
			}
			if e != nil && e.Operation() != jetstream.KeyValuePut {
				continue
			}
			return e, nil
		}
	}
}
