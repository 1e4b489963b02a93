package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/sessionwire"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// The record reads: a session's record (Get) and an owner's (List) are
// read from the SESSIONS bucket, not asked of a worker, so that an ended
// or paused session, whose worker holds it no longer, is read the same.

// records opens the SESSIONS bucket on first use: a client may start
// before any worker has made it, with credentials that may not make it.
type records struct {
	js jetstream.JetStream
	mu sync.Mutex
	kv jetstream.KeyValue
}

func (r *records) open(ctx context.Context) (jetstream.KeyValue, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kv != nil {
		return r.kv, nil
	}
	kv, err := r.js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = r.js.CreateKeyValue(ctx, sessionwire.BucketConfig(Bucket))
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = r.js.KeyValue(ctx, Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("sessions: open %s (no worker serves sessions yet?): %w", Bucket, err)
	}
	r.kv = kv
	return kv, nil
}

// Get returns a session's record: ErrNotFound for one that does not
// exist or is another owner's.
func (c *Client) Get(ctx context.Context, id string) (*Info, error) {
	if !ValidID(id) {
		return nil, sessionapi.Errorf(sessionapi.ErrNotFound, "no session %q", id)
	}
	kv, err := c.rec.open(ctx)
	if err != nil {
		return nil, err
	}
	info, _, err := ReadRecord(ctx, kv, c.tenant, c.owner, id)
	return info, err
}

// ReadRecord returns session id's record and its entry, as owner of
// tenant may see it: ErrNotFound for one that does not exist or is
// another owner's. A record of an earlier version, kept by ID alone, is
// read there.
func ReadRecord(ctx context.Context, kv jetstream.KeyValue, tenant, owner, id string) (*Info, jetstream.KeyValueEntry, error) {
	if !ValidID(id) {
		return nil, nil, sessionapi.Errorf(sessionapi.ErrNotFound, "no session %q", id)
	}
	e, err := kv.Get(ctx, sessionwire.Key(tenant, owner, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		e, err = kv.Get(ctx, id)
	}
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, nil, sessionapi.Errorf(sessionapi.ErrNotFound, "no session %q", id)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("sessions: look up %s: %w", id, err)
	}
	var info Info
	if err := json.Unmarshal(e.Value(), &info); err != nil {
		return nil, nil, fmt.Errorf("sessions: record of %s: %w", id, err)
	}
	if info.Owner != owner {
		return nil, nil, sessionapi.Errorf(sessionapi.ErrNotFound, "no session %q", id)
	}
	return &info, e, nil
}

// MaxList bounds what List returns.
const MaxList = 1000

// List returns the owner's sessions, running first, newest first. It
// reads the owner's records alone (OwnerKeys).
func (c *Client) List(ctx context.Context) ([]Info, error) {
	kv, err := c.rec.open(ctx)
	if err != nil {
		return nil, err
	}
	entries, err := sessionwire.Records(ctx, kv, sessionwire.OwnerKeys(c.tenant, c.owner)+".*", 0)
	if err != nil {
		return nil, fmt.Errorf("sessions: list: %w", err)
	}
	var out []Info
	for _, e := range entries {
		var info Info
		if json.Unmarshal(e.Value(), &info) == nil && info.Owner == c.owner {
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(a, b Info) int {
		if (a.Status == StatusRunning) != (b.Status == StatusRunning) {
			if a.Status == StatusRunning {
				return -1
			}
			return 1
		}
		return b.CreatedAt.Compare(a.CreatedAt)
	})
	if len(out) > MaxList {
		out = out[:MaxList]
	}
	return out, nil
}
