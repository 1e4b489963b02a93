package workspace

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// A workspace's head moves only through Transition, and is written only
// by compare-and-swap on the key's revision: a writer reads the head,
// computes the next one, and writes it if nobody wrote in between, else
// reads again.
//
// The rule: one step at a time per workspace. States of the head:
//
//	absent ──begin──▶ running(J) ──save──▶ saved(J) ──release──▶ idle
//	idle   ──begin──▶ running(J)            │
//	running(J) ──release──▶ idle (J ended without saving, or gave up)
//	absent, idle ──checkpoint──▶ idle (a session's next revision)
//	                                   (none: the tree did not change)
//
// begin by J on running(J) holds the step anew under a new lease (J's
// earlier attempt died before saving: it starts again from the same
// base); on saved(J) it is a replay (J's earlier attempt saved and died
// before storing its result: it runs again against the same base, saves
// nothing, and reports the revision already saved). begin by J on K's
// step waits, unless K is gone (K has a result, or is no longer queued):
// K's step is then over, saved or not, and J holds the head. A checkpoint
// never moves a head a step holds: it fails, and the session tries again
// at its next idle point.

// Action is what the caller does with a transition's result.
type Action int

const (
	Write  Action = iota // compare-and-swap the head to next
	Replay               // run against the step's base; write nothing
	Wait                 // another job holds the workspace
	None                 // nothing to write
)

func (a Action) String() string { return [...]string{"write", "replay", "wait", "none"}[a] }

// Events of a head. Now and Worker are recorded in what is written.
type (
	// Begin: job wants to start a step. Fork, when set, is the source it
	// starts from, its revision resolved. HolderGone says whether the job
	// holding the head, if another, has finished (the caller looks it up).
	Begin struct {
		Job, Worker string
		Fork        *jobs.WorkspaceRef
		HolderGone  bool
		Lease       string // this hold's name, fresh for each try
		Now         time.Time
	}
	// Save: job, holding the head under Lease, saved its snapshot to
	// Snap.Object; it becomes the next revision. Keep bounds the
	// revisions kept.
	Save struct {
		Job, Lease string
		Snap       Saved
		Keep       int
		Now        time.Time
	}
	// Checkpoint: a session (By) of Owner saved its snapshot to
	// Snap.Object, outside any step; it becomes the next revision. A new
	// head records Owner when it is a session's own workspace
	// (fleet.SessionWorkspace), and Forked, the source it started from.
	// A snapshot with the digest of the head's revision is no new
	// revision unless the head is older than Renew: the tree did not
	// change, and a revision saved all the same renews the workspace's
	// and its snapshot's lifetimes.
	Checkpoint struct {
		By, Owner string
		Forked    *jobs.WorkspaceRef
		Snap      Saved
		Keep      int
		Renew     time.Duration
		Now       time.Time
	}
	// Release: job's result is stored, or it gave the step up. Lease,
	// when set, releases only that hold of the head: a delivery whose
	// step was held anew leaves the new holder's step alone.
	Release struct {
		Job, Lease string
		Now        time.Time
	}
)

// Saved is a snapshot put in SNAPSHOTS, on its way to being a revision.
type Saved struct {
	Object    string
	SizeBytes int64
	Files     int
	SHA256    string
}

var (
	// ErrForkExists: a job forks into a workspace that already has a
	// revision.
	ErrForkExists = errors.New("a fork starts a new workspace")
	// ErrNotHeld: the job no longer holds the head (removed, or held
	// anew as if it were gone).
	ErrNotHeld = errors.New("the workspace changed under the step")
	// ErrBusy: a checkpoint meets a job's step in flight.
	ErrBusy = errors.New("a job's step is in flight")
)

// Transition returns the head after ev, for a head h (nil: absent) of
// the workspace name, and what to do with it. It never modifies h.
func Transition(name string, h *jobs.WorkspaceHead, ev any) (*jobs.WorkspaceHead, Action, error) {
	switch ev := ev.(type) {
	case Begin:
		return begin(name, h, ev)
	case Save:
		// Only the latest holder saves: an earlier delivery of the same
		// job, still running after its lease ran out, does not.
		if h == nil || h.Step == nil || h.Step.Job != ev.Job || h.Step.State != jobs.StepRunning || h.Step.Lease != ev.Lease {
			return h, None, ErrNotHeld
		}
		next := withRevision(h, ev.Snap, ev.Job, ev.Keep, ev.Now)
		next.Step.State = jobs.StepSaved
		return next, Write, nil
	case Checkpoint:
		return checkpoint(name, h, ev)
	case Release:
		if h == nil || h.Step == nil || h.Step.Job != ev.Job || (ev.Lease != "" && h.Step.Lease != ev.Lease) {
			return h, None, nil
		}
		next := Clone(h)
		next.Step = nil
		next.UpdatedAt = ev.Now
		return next, Write, nil
	}
	panic(fmt.Sprintf("workspace head: unknown event %T", ev))
}

func begin(name string, h *jobs.WorkspaceHead, ev Begin) (*jobs.WorkspaceHead, Action, error) {
	if h != nil && h.Step != nil {
		switch {
		case h.Step.Job == ev.Job && h.Step.State == jobs.StepSaved:
			return h, Replay, nil
		case h.Step.Job == ev.Job: // running: hold it anew
			next := Clone(h)
			next.Step.Worker, next.Step.Since, next.Step.Lease, next.UpdatedAt = ev.Worker, ev.Now, ev.Lease, ev.Now
			return next, Write, nil
		case !ev.HolderGone:
			return h, Wait, nil
		}
		// The holder is gone: its step is over, saved or not.
	}
	next := &jobs.WorkspaceHead{Name: name}
	if h != nil {
		next = Clone(h)
	}
	base := jobs.WorkspaceRef{Name: name, Revision: next.Revision}
	if ev.Fork != nil {
		if next.Revision > 0 {
			return h, None, fmt.Errorf("%w: workspace %s has revision %d", ErrForkExists, name, next.Revision)
		}
		base = *ev.Fork
		f := *ev.Fork
		next.Forked = &f
	}
	next.Step = &jobs.InFlight{Job: ev.Job, State: jobs.StepRunning, Base: base, Worker: ev.Worker, Since: ev.Now, Lease: ev.Lease}
	next.UpdatedAt = ev.Now
	return next, Write, nil
}

func checkpoint(name string, h *jobs.WorkspaceHead, ev Checkpoint) (*jobs.WorkspaceHead, Action, error) {
	if h == nil {
		h = &jobs.WorkspaceHead{Name: name, Forked: ev.Forked}
		if fleet.IsSessionWorkspace(name) {
			h.Owner = ev.Owner
		}
	}
	if err := Allows(name, h, ev.Owner); err != nil {
		return h, None, err
	}
	if h.Step != nil {
		return h, None, fmt.Errorf("%w: workspace %s is held by job %s", ErrBusy, name, h.Step.Job)
	}
	if h.Revision > 0 && h.SHA256 == ev.Snap.SHA256 && ev.Now.Sub(h.UpdatedAt) < ev.Renew {
		return h, None, nil
	}
	return withRevision(h, ev.Snap, ev.By, ev.Keep, ev.Now), Write, nil
}

// withRevision returns head h once by (a job, or a session) saved
// snapshot s as its next revision, keeping the last keep revisions (at
// least 2).
func withRevision(h *jobs.WorkspaceHead, s Saved, by string, keep int, now time.Time) *jobs.WorkspaceHead {
	next := Clone(h)
	next.Revision++
	next.SizeBytes, next.Files, next.SHA256, next.Job = s.SizeBytes, s.Files, s.SHA256, by
	next.Kept = append(next.Kept, next.Revision)
	if keep = max(keep, 2); len(next.Kept) > keep {
		next.Kept = next.Kept[len(next.Kept)-keep:]
	}
	if next.Snapshots == nil {
		next.Snapshots = map[int64]string{}
	}
	next.Snapshots[next.Revision] = s.Object
	for r := range next.Snapshots {
		if !slices.Contains(next.Kept, r) {
			delete(next.Snapshots, r)
		}
	}
	next.UpdatedAt = now
	return next
}

// Pruned returns the snapshots of the revisions kept before that are not
// kept after.
func Pruned(before, after *jobs.WorkspaceHead) []string {
	if before == nil || after == nil {
		return nil
	}
	var out []string
	for _, r := range before.Kept {
		if !slices.Contains(after.Kept, r) {
			out = append(out, before.Snapshot(r))
		}
	}
	return out
}

// Clone returns a deep copy of h.
func Clone(h *jobs.WorkspaceHead) *jobs.WorkspaceHead {
	c := *h
	c.Kept = slices.Clone(h.Kept)
	c.Snapshots = maps.Clone(h.Snapshots)
	if h.Step != nil {
		s := *h.Step
		c.Step = &s
	}
	if h.Forked != nil {
		f := *h.Forked
		c.Forked = &f
	}
	return &c
}
