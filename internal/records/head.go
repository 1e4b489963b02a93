package records

import (
	"maps"
	"slices"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// WithRevision returns head h once by (a job, or a session's checkpoint)
// saved its next revision to object, as a worker writes it by
// compare-and-swap: the revisions kept (the last keep, at least 2) and
// the objects that name them. h is not modified; what it has in flight
// is kept.
func WithRevision(h *jobs.WorkspaceHead, object string, size int64, files int, sha, by string, keep int, now time.Time) *jobs.WorkspaceHead {
	next := *h
	next.Kept = slices.Clone(h.Kept)
	next.Snapshots = maps.Clone(h.Snapshots)
	if h.Step != nil {
		st := *h.Step
		next.Step = &st
	}
	if h.Forked != nil {
		f := *h.Forked
		next.Forked = &f
	}
	next.Revision++
	next.SizeBytes, next.Files, next.SHA256, next.Job = size, files, sha, by
	next.Kept = append(next.Kept, next.Revision)
	if keep = max(keep, 2); len(next.Kept) > keep {
		next.Kept = next.Kept[len(next.Kept)-keep:]
	}
	if next.Snapshots == nil {
		next.Snapshots = map[int64]string{}
	}
	next.Snapshots[next.Revision] = object
	for r := range next.Snapshots {
		if !slices.Contains(next.Kept, r) {
			delete(next.Snapshots, r)
		}
	}
	next.UpdatedAt = now
	return &next
}
