package sessions

import (
	"github.com/sandfleet/sandfleet/internal/field"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

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
