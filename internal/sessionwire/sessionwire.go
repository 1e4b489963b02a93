// Package sessionwire is what the sessions' client (pkg/sessions) and the
// worker's session host (internal/sessionhost) exchange besides a
// session's operations (pkg/sessionapi): the envelope of a call and of
// its answer, the SESSIONS bucket's configuration and its keys.
package sessionwire

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// Call is what a request to a session (or a create) carries: who asks,
// an idempotency key (a retried call with the same key gets the first
// call's answer and runs nothing again) and the operation's body.
type Call struct {
	Owner string `json:"owner,omitempty"`
	// Tenant is the owner's tenant ("" for none): a record is kept
	// under its tenant and owner (Key).
	Tenant string          `json:"tenant,omitempty"`
	Key    string          `json:"key,omitempty"`
	Body   json.RawMessage `json:"body,omitempty"`
}

// Answer is a session's reply: a result or an error.
type Answer struct {
	Result json.RawMessage   `json:"result,omitempty"`
	Error  *sessionapi.Error `json:"error,omitempty"`
}

// BucketConfig is the sessions' bucket's (sessions.Bucket): a record is kept two days after
// its session's last change (a session lives a day at most).
func BucketConfig(bucket string) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:       bucket,
		Description:  "sandfleet sessions: their records, by tenant, owner and ID",
		TTL:          48 * time.Hour,
		MaxBytes:     256 << 20,
		MaxValueSize: 64 << 10,
		History:      1,
	}
}

// A session's record is kept in the SESSIONS bucket under a key that
// names its tenant and its owner before its ID (Key): an owner's list,
// and the count of a tenant's or an owner's live sessions, read that
// owner's or tenant's records alone, as a filtered watch of their keys.
// Records of earlier versions, by ID alone, are still read by ID
// (legacy keys) until a worker of this version moves them (Migrate).

// Key is the KV key of session id of owner, tenant ("" for none).
func Key(tenant, owner, id string) string { return OwnerKeys(tenant, owner) + "." + id }

// OwnerKeys is the prefix of an owner's keys (Key without the ID); a
// filter of them is OwnerKeys(tenant, owner)+".*".
func OwnerKeys(tenant, owner string) string { return TenantKeys(tenant) + ".o" + seg(owner) }

// TenantKeys is the first token of a tenant's keys; a filter of every
// record of the tenant is TenantKeys(tenant)+".>".
func TenantKeys(tenant string) string { return "t" + seg(tenant) }

// seg encodes a name as one token of a key: KV keys take letters,
// digits, '-', '_', '=', '/' and dots between tokens; an owner may be
// any string.
func seg(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// IDOfKey returns the session ID a key ends with (a legacy key is the ID).
func IDOfKey(key string) string { return key[strings.LastIndexByte(key, '.')+1:] }

// LegacyKey reports whether key is an earlier version's: the ID alone.
func LegacyKey(key string) bool { return !strings.Contains(key, ".") }

// Records returns the records under the keys filter matches (OwnerKeys or TenantKeys
// and a wildcard), up to limit (0: all): one filtered watch, which reads no other key's record.
func Records(ctx context.Context, kv jetstream.KeyValue, filter string, limit int) ([]jetstream.KeyValueEntry, error) {
	w, err := kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	var out []jetstream.KeyValueEntry
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return out, nil
			}
			if e == nil { // the current values are all read
				return out, nil
			}
			out = append(out, e)
			if limit > 0 && len(out) >= limit {
				return out, nil
			}
		}
	}
}
