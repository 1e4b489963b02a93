package sessionhost

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/sessionwire"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// migrate moves the records an earlier version kept by ID alone under
// their owner's keys (sessionwire.Key), so that lists, which read an owner's
// keys alone, find them. A record of a session that runs on another
// worker stays where it is (that worker writes it there), still read by
// ID, until it ends and a later start moves it.
func (h *Host) migrate(ctx context.Context) {
	lister, err := h.kv.ListKeys(ctx)
	if err != nil {
		return
	}
	keys := slices.Collect(func(yield func(string) bool) {
		for k := range lister.Keys() {
			if sessionwire.LegacyKey(k) && !yield(k) {
				return
			}
		}
	})
	_ = lister.Stop()
	moved := 0
	for _, k := range keys {
		e, err := h.kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var info sessions.Info
		if json.Unmarshal(e.Value(), &info) != nil || info.ID != k {
			continue
		}
		if (info.Status == sessions.StatusRunning || info.Status == sessions.StatusResuming) && info.Worker != h.cfg.Worker {
			continue
		}
		_, err = h.kv.Create(ctx, sessionwire.Key(info.Tenant, info.Owner, k), e.Value())
		if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if h.kv.Delete(ctx, k, jetstream.LastRevision(e.Revision())) == nil {
			moved++
		}
	}
	if moved > 0 {
		h.log.Info("moved sessions' records under their owners' keys", "records", moved)
	}
}
