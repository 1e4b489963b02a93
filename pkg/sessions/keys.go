package sessions

import (
	"encoding/base64"
	"strings"

	"github.com/sandfleet/sandfleet/internal/field"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

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

// Bounds of what a session's record keeps of its spec: a record is at
// most MaxRecordBytes, so that the SESSIONS bucket (BucketConfig) holds
// thousands of records per MiB whatever the callers send.
const (
	// MaxLabelBytes bounds a session's labels in all (keys and values),
	// besides field.Labels' bounds on each, as a job's are.
	MaxLabelBytes = 4 << 10
	// MaxEnvBytes bounds the env a persistent session's record keeps
	// for a resume (names and values in all).
	MaxEnvBytes = 8 << 10
	// MaxRecordBytes is the most a record may take.
	MaxRecordBytes = 16 << 10
)

// ValidLabels checks a session's labels as a job's (count, sizes, no
// control characters) and their size in all.
func ValidLabels(labels map[string]string) error {
	if err := field.Labels(labels); err != nil {
		return sessionapi.Errorf(sessionapi.ErrInvalid, "%v", err)
	}
	if n := mapBytes(labels); n > MaxLabelBytes {
		return sessionapi.Errorf(sessionapi.ErrInvalid, "labels: %d bytes in all, over the limit of %d", n, MaxLabelBytes)
	}
	return nil
}

// ValidRecordEnv checks the env a persistent session's record keeps.
func ValidRecordEnv(env map[string]string) error {
	if n := mapBytes(env); n > MaxEnvBytes {
		return sessionapi.Errorf(sessionapi.ErrInvalid, "env: %d bytes in all, over the limit of %d a persistent session keeps for its resume", n, MaxEnvBytes)
	}
	return nil
}

func mapBytes(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	return n
}
