package worker

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// A workspace's head (jobs.WorkspaceHead, a key of WORKSPACES) moves only
// through transition, and is written only by compare-and-swap on the
// key's revision: a worker reads the head, computes the next one, and
// writes it if nobody wrote in between, else reads again.
//
// The rule: one step at a time per workspace. States of the head:
//
//	absent ──begin──▶ running(J) ──save──▶ saved(J) ──release──▶ idle
//	idle   ──begin──▶ running(J)            │
//	running(J) ──release──▶ idle (J ended without saving, or gave up)
//
// begin by J on running(J) takes the step over (J's earlier attempt died
// before saving: it starts again from the same base); on saved(J) it is a
// replay (J's earlier attempt saved and died before storing its result:
// it runs again against the same base, saves nothing, and reports the
// revision already saved). begin by J on K's step waits, unless K is gone
// (K has a result, or is no longer queued): K's step is then over, saved
// or not, and J takes the head.

// action is what the caller does with a transition's result.
type action int

const (
	actWrite  action = iota // compare-and-swap the head to next
	actReplay               // run against the step's base; write nothing
	actWait                 // another job holds the workspace
	actNone                 // nothing to write
)

func (a action) String() string { return [...]string{"write", "replay", "wait", "none"}[a] }

// Events of a head. Now and Worker are recorded in what is written.
type (
	// evBegin: job wants to start a step. Fork, when set, is the source it
	// starts from, its revision resolved. HolderGone says whether the job
	// holding the head, if another, has finished (the caller looks it up).
	evBegin struct {
		Job, Worker string
		Fork        *jobs.WorkspaceRef
		HolderGone  bool
		Now         time.Time
	}
	// evSave: job saved its snapshot; it becomes the next revision.
	// Keep bounds the revisions kept.
	evSave struct {
		Job       string
		SizeBytes int64
		Files     int
		SHA256    string
		Keep      int
		Now       time.Time
	}
	// evRelease: job's result is stored, or it gave the step up.
	evRelease struct {
		Job string
		Now time.Time
	}
)

var (
	// errForkExists: a job forks into a workspace that already has a
	// revision.
	errForkExists = errors.New("a fork starts a new workspace")
	// errNotHeld: the job no longer holds the head (removed, or taken
	// over as if it were gone).
	errNotHeld = errors.New("the workspace changed under the step")
)

// transition returns the head after ev, for a head h (nil: absent) of
// the workspace name, and what to do with it. It never modifies h.
func transition(name string, h *jobs.WorkspaceHead, ev any) (*jobs.WorkspaceHead, action, error) {
	switch ev := ev.(type) {
	case evBegin:
		if h != nil && h.Step != nil {
			switch {
			case h.Step.Job == ev.Job && h.Step.State == jobs.StepSaved:
				return h, actReplay, nil
			case h.Step.Job == ev.Job: // running: take it over
				next := clone(h)
				next.Step.Worker, next.Step.Since, next.UpdatedAt = ev.Worker, ev.Now, ev.Now
				return next, actWrite, nil
			case !ev.HolderGone:
				return h, actWait, nil
			}
			// The holder is gone: its step is over, saved or not.
		}
		next := &jobs.WorkspaceHead{Name: name}
		if h != nil {
			next = clone(h)
		}
		base := jobs.WorkspaceRef{Name: name, Revision: next.Revision}
		if ev.Fork != nil {
			if next.Revision > 0 {
				return h, actNone, fmt.Errorf("%w: workspace %s has revision %d", errForkExists, name, next.Revision)
			}
			base = *ev.Fork
			f := *ev.Fork
			next.Forked = &f
		}
		next.Step = &jobs.InFlight{Job: ev.Job, State: jobs.StepRunning, Base: base, Worker: ev.Worker, Since: ev.Now}
		next.UpdatedAt = ev.Now
		return next, actWrite, nil

	case evSave:
		if h == nil || h.Step == nil || h.Step.Job != ev.Job || h.Step.State != jobs.StepRunning {
			return h, actNone, errNotHeld
		}
		next := clone(h)
		next.Revision++
		next.SizeBytes, next.Files, next.SHA256, next.Job = ev.SizeBytes, ev.Files, ev.SHA256, ev.Job
		next.Kept = append(next.Kept, next.Revision)
		if keep := max(ev.Keep, 2); len(next.Kept) > keep {
			next.Kept = next.Kept[len(next.Kept)-keep:]
		}
		next.Step.State = jobs.StepSaved
		next.UpdatedAt = ev.Now
		return next, actWrite, nil

	case evRelease:
		if h == nil || h.Step == nil || h.Step.Job != ev.Job {
			return h, actNone, nil
		}
		next := clone(h)
		next.Step = nil
		next.UpdatedAt = ev.Now
		return next, actWrite, nil
	}
	panic(fmt.Sprintf("workspace head: unknown event %T", ev))
}

// pruned returns the revisions kept before that are not kept after.
func pruned(before, after *jobs.WorkspaceHead) []int64 {
	if before == nil || after == nil {
		return nil
	}
	var out []int64
	for _, r := range before.Kept {
		if !slices.Contains(after.Kept, r) {
			out = append(out, r)
		}
	}
	return out
}

func clone(h *jobs.WorkspaceHead) *jobs.WorkspaceHead {
	c := *h
	c.Kept = slices.Clone(h.Kept)
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
