package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/records"
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
		Take        string // this taking's name, fresh for each try
		Now         time.Time
	}
	// evSave: job, as it took the head (Take), saved its snapshot to
	// Object; it becomes the next revision. Keep bounds the revisions
	// kept.
	evSave struct {
		Job, Take string
		Object    string
		SizeBytes int64
		Files     int
		SHA256    string
		Keep      int
		Now       time.Time
	}
	// evRelease: job's result is stored, or it gave the step up. Take,
	// when set, releases only that taking of the head: a delivery that was
	// taken over leaves the taker's step alone.
	evRelease struct {
		Job, Take string
		Now       time.Time
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
				next.Step.Worker, next.Step.Since, next.Step.Take, next.UpdatedAt = ev.Worker, ev.Now, ev.Take, ev.Now
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
		next.Step = &jobs.InFlight{Job: ev.Job, State: jobs.StepRunning, Base: base, Worker: ev.Worker, Since: ev.Now, Take: ev.Take}
		next.UpdatedAt = ev.Now
		return next, actWrite, nil

	case evSave:
		// Only the latest taker saves: an earlier delivery of the same
		// job, still running after its lease ran out, does not.
		if h == nil || h.Step == nil || h.Step.Job != ev.Job || h.Step.State != jobs.StepRunning || h.Step.Take != ev.Take {
			return h, actNone, errNotHeld
		}
		next := records.WithRevision(h, ev.Object, ev.SizeBytes, ev.Files, ev.SHA256, ev.Job, ev.Keep, ev.Now)
		next.Step.State = jobs.StepSaved
		return next, actWrite, nil

	case evRelease:
		if h == nil || h.Step == nil || h.Step.Job != ev.Job || (ev.Take != "" && h.Step.Take != ev.Take) {
			return h, actNone, nil
		}
		next := clone(h)
		next.Step = nil
		next.UpdatedAt = ev.Now
		return next, actWrite, nil
	}
	panic(fmt.Sprintf("workspace head: unknown event %T", ev))
}

// pruned returns the snapshots of the revisions kept before that are not
// kept after.
func pruned(before, after *jobs.WorkspaceHead) []string {
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

func clone(h *jobs.WorkspaceHead) *jobs.WorkspaceHead {
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

// The head in WORKSPACES: read with its revision, written by
// compare-and-swap on it.

// heads is the bucket of the heads.
func (w *Worker) heads() jetstream.KeyValue { return w.stores.Workspaces.Heads }

// releaseHead removes job's step from the head of name, if it holds it
// (as take, when take is set).
func (w *Worker) releaseHead(name, job, take string, log *slog.Logger) {
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		h, rev, err := w.readHead(ctx, name)
		if err == nil {
			next, act, _ := transition(name, h, evRelease{Job: job, Take: take, Now: time.Now().UTC()})
			if act != actWrite {
				cancel()
				return
			}
			_, err = w.writeHead(ctx, name, false, rev, next)
		}
		cancel()
		if err == nil {
			return
		}
		if !errors.Is(err, errRaced) {
			log.Warn("release the workspace; the next job takes it once this job's result is seen", "err", err)
			return
		}
	}
}

// errRaced: the head changed since it was read.
var errRaced = errors.New("workspace head changed")

// readHead returns the head of name and its KV revision; nil when absent.
func (w *Worker) readHead(ctx context.Context, name string) (*jobs.WorkspaceHead, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	e, err := w.heads().Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	h, err := jobs.DecodeWorkspaceHead(name, e.Value())
	if err != nil {
		return nil, 0, err
	}
	return h, e.Revision(), nil
}

// writeHead writes next over the head read at rev (create: there was
// none), or returns errRaced when it changed meanwhile.
func (w *Worker) writeHead(ctx context.Context, name string, create bool, rev uint64, next *jobs.WorkspaceHead) (uint64, error) {
	data, err := json.Marshal(next)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var newRev uint64
	if create {
		newRev, err = w.heads().Create(ctx, name, data)
	} else {
		newRev, err = w.heads().Update(ctx, name, data, rev)
	}
	if raced(err) {
		return 0, errRaced
	}
	return newRev, err
}

// raced reports whether a KV write failed for the key's revision: the
// codes differ between a stream of one replica and a replicated one.
func raced(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// holderGone reports whether job has finished: it has a result, or is no
// longer in the stream (a job leaves it only once its result is stored).
func (w *Worker) holderGone(ctx context.Context, job string) (bool, error) {
	if res, err := w.lookup(job); err != nil {
		return false, err
	} else if res != nil {
		return true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := w.stores.Stream.GetLastMsgForSubject(ctx, fleet.SubjectPrefix+"*."+job)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true, nil
	}
	return false, err
}
