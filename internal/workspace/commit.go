package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// A Commit saves a snapshot as a workspace's next revision, for a job's
// step (Save) and a session's checkpoint (Checkpoint) alike: the snapshot
// is put under an object of its own (fleet.SaveName with the lease), so
// that two live writers never write nor delete each other's, then the
// head is moved to it by compare-and-swap, read again on each race.
type Commit struct {
	Heads Heads
	Snaps Objects
	Name  string // the workspace
	Lease string // the name of the step's hold, or a checkpoint's own
	By    string // the job or session saving, in the object's metadata
	// Event is the event that makes snapshot s the next revision of h
	// (the head as read, nil when absent): a Save or a Checkpoint.
	Event func(h *jobs.WorkspaceHead, s Saved) any
}

// Run puts the snapshot, r's s.SizeBytes bytes, and moves the head to it.
// A refusal of the head (the step no longer holds it, a job holds it, it
// is another owner's) deletes the object and returns the transition's
// error. An error writing the head leaves the object: the write may have
// landed, and an object no head names expires with the snapshots' TTL.
// A put refused for the store's quota is returned as is (fleet.StoreFull).
func (c Commit) Run(ctx context.Context, r io.Reader, s Saved) (Moved, error) {
	h, rev, err := c.Heads.Read(ctx, c.Name)
	if err != nil {
		return Moved{}, err
	}
	// Refused, or nothing to save (a checkpoint of an unchanged tree),
	// before the put, if the head says so as read.
	if _, act, err := Transition(c.Name, h, c.Event(h, s)); err != nil {
		return c.refused(h, rev, err)
	} else if act != Write {
		return Moved{Before: h, Head: h, Rev: rev, Action: act}, nil
	}
	next := int64(1)
	if h != nil {
		next = h.Revision + 1
	}
	s.Object = fleet.SaveName(c.Name, next, c.Lease)
	if _, err := c.Snaps.Put(ctx, jetstream.ObjectMeta{Name: s.Object, Metadata: map[string]string{fleet.SnapshotJobMeta: c.By}}, r); err != nil {
		return Moved{}, fmt.Errorf("put %s: %w", s.Object, err)
	}
	m, err := c.Heads.move(ctx, c.Name, h, rev, func(h *jobs.WorkspaceHead) any { return c.Event(h, s) })
	if err != nil && refusal(err) {
		m, err = c.refused(m.Head, m.Rev, err)
	}
	if (err == nil || refusal(err)) && m.Action != Write {
		_ = c.Snaps.Delete(ctx, s.Object) // this lease's alone: no head names it
	}
	return m, err
}

// refused is the end of a commit the head refused: none, unless the head
// is at this commit's own revision (a try whose answer was lost).
func (c Commit) refused(h *jobs.WorkspaceHead, rev uint64, err error) (Moved, error) {
	if h != nil && h.Revision > 0 && h.Snapshot(h.Revision) == fleet.SaveName(c.Name, h.Revision, c.Lease) {
		return Moved{Before: h, Head: h, Rev: rev, Action: Write}, nil
	}
	return Moved{Before: h, Head: h, Rev: rev, Action: None}, err
}

// refusal reports whether err is the head's refusal of a commit, rather
// than a failure to read or write it.
func refusal(err error) bool {
	return errors.Is(err, ErrNotHeld) || errors.Is(err, ErrBusy) || errors.Is(err, ErrOwner)
}
