package templates

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Writing a registration: the registry's caps counted around each new
// key, and a key changed meanwhile read again.

// keyCap is a cap on how many keys match filter.
type keyCap struct {
	filter string
	max    int
	what   string
}

// within checks that the registry's keys stay within MaxTemplates and
// caps: with created, the new key is among them; without, it is to come.
func (r *Registry) within(ctx context.Context, caps []keyCap, created bool) error {
	for _, c := range append([]keyCap{{"", MaxTemplates, "the registry"}}, caps...) {
		var keys []string
		var err error
		if c.filter == "" {
			keys, err = r.keys(ctx)
		} else {
			keys, err = r.keys(ctx, c.filter)
		}
		if err != nil {
			return err
		}
		if n := len(keys); n > c.max || n == c.max && !created {
			return fmt.Errorf("%w: %s hold %d, the most they may", ErrFull, c.what, c.max)
		}
	}
	return nil
}

// put stores t under its key. A new key must leave the registry within
// MaxTemplates and caps, checked before it is created and again after,
// when the count includes it: a key whose second check fails is removed
// again, so that concurrent puts of new names never leave a cap passed
// (some may all be refused, and are retried), since the last of them to
// count sees every one that stays. A new version of a key takes no room,
// so it is written only over the revision read: a key removed (or made)
// meanwhile is counted again, else a put racing a delete of its key
// would bring the key back uncounted, past the caps.
func (r *Registry) put(ctx context.Context, t Template, caps []keyCap) (*Template, error) {
	t.Version, t.Updated = 0, time.Now().UTC()
	if err := t.Validate(); err != nil {
		return nil, err
	}
	data, err := json.Marshal(&t)
	if err != nil {
		return nil, err
	}
	if len(data) > MaxBytes {
		return nil, invalid("%d bytes, over the cap of %d", len(data), MaxBytes)
	}
	key := Key(t.Tenant, t.Name)
	for try := 1; ; try++ {
		rev, err := r.putOnce(ctx, key, data, caps)
		if errors.Is(err, errRaced) && try < maxPutTries {
			continue
		}
		if errors.Is(err, errRaced) {
			return nil, fmt.Errorf("%w: %s changed %d times while it was written; retry", ErrFull, key, try)
		}
		if err != nil {
			return nil, err
		}
		t.Version = rev
		return &t, nil
	}
}

// maxPutTries is how often put reads its key again after another request
// changed it between the read and the write.
const maxPutTries = 5

// errRaced is a key changed by another request between put's read and its
// write.
var errRaced = errors.New("changed meanwhile")

// putOnce writes data under key once: over the revision it reads, or as
// a new key within caps.
func (r *Registry) putOnce(ctx context.Context, key string, data []byte, caps []keyCap) (uint64, error) {
	e, err := r.kv.Get(ctx, key)
	switch {
	case err == nil:
		rev, err := r.kv.Update(ctx, key, data, e.Revision())
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			return 0, errRaced
		}
		if err != nil {
			return 0, fmt.Errorf("templates: put %s: %w", key, err)
		}
		return rev, nil
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return 0, fmt.Errorf("templates: get %s: %w", key, err)
	}
	if err := r.within(ctx, caps, false); err != nil {
		return 0, err
	}
	rev, err := r.kv.Create(ctx, key, data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		// Made meanwhile by another put of the name: read again, and
		// write over what it made.
		return 0, errRaced
	}
	if err != nil {
		return 0, fmt.Errorf("templates: create %s: %w", key, err)
	}
	if err := r.within(ctx, caps, true); err != nil {
		// Another put took the room meanwhile: undo this one, even if
		// a new version was written over it since (a put that found it
		// made), else a tenant rewriting each new name as it is made
		// would keep every one past the cap.
		if derr := r.kv.Delete(ctx, key); derr != nil {
			return 0, errors.Join(err, derr)
		}
		return 0, err
	}
	return rev, nil
}
