package sessionhost

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/sessionwire"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// admit checks a create (or a resume of session resuming) against the
// caps on the live sessions its owner and its tenant hold (Config's
// MaxPerToken and MaxPerTenant), counting their records in the fleet's
// SESSIONS bucket (theirs alone: their keys' prefix) and the creates
// this host admitted whose records are not written yet. It returns the
// release of the admission, to call once the create's record is written
// or the create failed.
func (h *Host) admit(call sessionwire.Call, resuming string) (release func(), _ error) {
	type capped struct {
		name, prefix, filter string
		max                  int
		who                  string
	}
	var caps []capped
	if owner := sessionwire.OwnerKeys(call.Tenant, call.Owner); h.cfg.MaxPerToken > 0 && (call.Owner != "" || call.Tenant != "") {
		caps = append(caps, capped{sessionapi.CapPerToken, owner, owner + ".*", h.cfg.MaxPerToken, "token " + call.Owner})
	}
	if tenant := sessionwire.TenantKeys(call.Tenant); h.cfg.MaxPerTenant > 0 && call.Tenant != "" {
		caps = append(caps, capped{sessionapi.CapPerTenant, tenant, tenant + ".>", h.cfg.MaxPerTenant, "tenant " + call.Tenant})
	}
	if len(caps) == 0 {
		return func() {}, nil
	}
	h.admitting.Lock()
	defer h.admitting.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range caps {
		entries, err := sessionwire.Records(ctx, h.kv, c.filter, 0)
		if err != nil {
			return nil, sessionapi.Errorf(sessionapi.ErrFailed, "count the sessions of %s: %v", c.who, err)
		}
		h.mu.Lock()
		n := h.pending[c.prefix]
		h.mu.Unlock()
		for _, e := range entries {
			if isLive(e, resuming) {
				n++
			}
		}
		if c.name == sessionapi.CapPerToken {
			h.trimEnded(ctx, entries)
		}
		if n >= c.max {
			return nil, sessionapi.CapErrorf(c.name, "%s holds %d live sessions, its cap (the workers' --session-max-per-%s %d): delete or pause one first",
				c.who, n, map[string]string{sessionapi.CapPerToken: "token", sessionapi.CapPerTenant: "tenant"}[c.name], c.max)
		}
	}
	h.mu.Lock()
	for _, c := range caps {
		h.pending[c.prefix]++
	}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, c := range caps {
			if h.pending[c.prefix]--; h.pending[c.prefix] <= 0 {
				delete(h.pending, c.prefix)
			}
		}
	}, nil
}

// isLive reports whether a record is of a session that holds a sandbox,
// or is on its way to one (but session resuming, which a resume takes
// over).
func isLive(e jetstream.KeyValueEntry, resuming string) bool {
	var info struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if json.Unmarshal(e.Value(), &info) != nil || info.ID == resuming {
		return false
	}
	return info.Status == sessions.StatusRunning || info.Status == sessions.StatusResuming
}

// trimEnded removes an owner's oldest ended records past sessions.MaxList
// (what a list shows): the SESSIONS bucket keeps a record two days, and
// an owner's churn of creates and deletes must not fill it for everyone.
func (h *Host) trimEnded(ctx context.Context, entries []jetstream.KeyValueEntry) {
	if len(entries) < sessions.MaxList {
		return
	}
	type ended struct {
		key string
		at  time.Time
	}
	var old []ended
	for _, e := range entries {
		var info sessions.Info
		if json.Unmarshal(e.Value(), &info) == nil && info.Status == sessions.StatusEnded {
			old = append(old, ended{e.Key(), e.Created()})
		}
	}
	slices.SortFunc(old, func(a, b ended) int { return a.at.Compare(b.at) })
	for _, o := range old[:min(len(old), len(entries)-sessions.MaxList+1)] {
		_ = h.kv.Purge(ctx, o.key)
	}
}
