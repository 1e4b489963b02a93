package workspace

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

func TestTransition(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	idle := func(rev int64, kept ...int64) *jobs.WorkspaceHead {
		return &jobs.WorkspaceHead{Name: "ws", Revision: rev, Kept: kept, Job: "prev"}
	}
	with := func(h *jobs.WorkspaceHead, job string, st jobs.StepState, base jobs.WorkspaceRef) *jobs.WorkspaceHead {
		h.Step = &jobs.InFlight{Job: job, State: st, Base: base, Worker: "w0", Since: now.Add(-time.Minute)}
		return h
	}
	own := func(rev int64) jobs.WorkspaceRef { return jobs.WorkspaceRef{Name: "ws", Revision: rev} }
	base := &jobs.WorkspaceRef{Name: "base", Revision: 3}

	cases := []struct {
		name string
		h    *jobs.WorkspaceHead
		ev   any
		act  Action
		err  error
		// what the next head must show
		rev   int64
		step  jobs.StepState // "" for none
		from  jobs.WorkspaceRef
		kept  []int64
		owner string
	}{
		{name: "begin on a new workspace", h: nil, ev: Begin{Job: "J", Worker: "w1", Now: now},
			act: Write, step: jobs.StepRunning, from: own(0), owner: "J"},
		{name: "begin on an idle head", h: idle(4, 3, 4), ev: Begin{Job: "J", Now: now},
			act: Write, rev: 4, step: jobs.StepRunning, from: own(4), kept: []int64{3, 4}, owner: "J"},
		{name: "begin while another runs", h: with(idle(4), "K", jobs.StepRunning, own(4)), ev: Begin{Job: "J", Now: now},
			act: Wait, rev: 4, step: jobs.StepRunning, from: own(4), owner: "K"},
		{name: "begin while another's result is pending", h: with(idle(5), "K", jobs.StepSaved, own(4)), ev: Begin{Job: "J", Now: now},
			act: Wait, rev: 5, step: jobs.StepSaved, from: own(4), owner: "K"},
		{name: "begin over a gone holder that saved", h: with(idle(5, 4, 5), "K", jobs.StepSaved, own(4)), ev: Begin{Job: "J", HolderGone: true, Now: now},
			act: Write, rev: 5, step: jobs.StepRunning, from: own(5), kept: []int64{4, 5}, owner: "J"},
		{name: "begin over a gone holder that did not save", h: with(idle(4), "K", jobs.StepRunning, own(4)), ev: Begin{Job: "J", HolderGone: true, Now: now},
			act: Write, rev: 4, step: jobs.StepRunning, from: own(4), owner: "J"},
		{name: "redelivery after a death before saving: held anew, same base", h: with(idle(4), "J", jobs.StepRunning, own(4)), ev: Begin{Job: "J", Worker: "w2", Now: now},
			act: Write, rev: 4, step: jobs.StepRunning, from: own(4), owner: "J"},
		{name: "redelivery after a death after saving: replay", h: with(idle(5), "J", jobs.StepSaved, own(4)), ev: Begin{Job: "J", Worker: "w2", Now: now},
			act: Replay, rev: 5, step: jobs.StepSaved, from: own(4), owner: "J"},
		{name: "fork into a new workspace", h: nil, ev: Begin{Job: "J", Fork: base, Now: now},
			act: Write, step: jobs.StepRunning, from: *base, owner: "J"},
		{name: "fork into an empty workspace", h: idle(0), ev: Begin{Job: "J", Fork: base, Now: now},
			act: Write, step: jobs.StepRunning, from: *base, owner: "J"},
		{name: "fork into a workspace with a revision", h: idle(2), ev: Begin{Job: "J", Fork: base, Now: now},
			act: None, err: ErrForkExists, rev: 2},
		{name: "fork redelivered after saving: replay", h: with(idle(1), "J", jobs.StepSaved, *base), ev: Begin{Job: "J", Fork: base, Now: now},
			act: Replay, rev: 1, step: jobs.StepSaved, from: *base, owner: "J"},
		{name: "save", h: with(idle(4, 3, 4), "J", jobs.StepRunning, own(4)), ev: Save{Job: "J", Snap: Saved{SizeBytes: 10, Files: 2, SHA256: "ab"}, Keep: 2, Now: now},
			act: Write, rev: 5, step: jobs.StepSaved, from: own(4), kept: []int64{4, 5}, owner: "J"},
		{name: "save a fork", h: with(idle(0), "J", jobs.StepRunning, *base), ev: Save{Job: "J", Keep: 10, Now: now},
			act: Write, rev: 1, step: jobs.StepSaved, from: *base, kept: []int64{1}, owner: "J"},
		{name: "save after losing the head", h: with(idle(4), "K", jobs.StepRunning, own(4)), ev: Save{Job: "J", Keep: 10, Now: now},
			act: None, err: ErrNotHeld, rev: 4, step: jobs.StepRunning, from: own(4), owner: "K"},
		{name: "save on a removed workspace", h: nil, ev: Save{Job: "J", Keep: 10, Now: now}, act: None, err: ErrNotHeld},
		{name: "save twice", h: with(idle(5), "J", jobs.StepSaved, own(4)), ev: Save{Job: "J", Keep: 10, Now: now},
			act: None, err: ErrNotHeld, rev: 5, step: jobs.StepSaved, from: own(4), owner: "J"},
		{name: "release after saving", h: with(idle(5, 5), "J", jobs.StepSaved, own(4)), ev: Release{Job: "J", Now: now},
			act: Write, rev: 5, kept: []int64{5}},
		{name: "release without saving", h: with(idle(4), "J", jobs.StepRunning, own(4)), ev: Release{Job: "J", Now: now},
			act: Write, rev: 4},
		{name: "release of another's step", h: with(idle(4), "K", jobs.StepRunning, own(4)), ev: Release{Job: "J", Now: now},
			act: None, rev: 4, step: jobs.StepRunning, from: own(4), owner: "K"},
		{name: "release on an idle head", h: idle(4), ev: Release{Job: "J", Now: now}, act: None, rev: 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var before *jobs.WorkspaceHead
			if tc.h != nil {
				before = Clone(tc.h)
			}
			next, act, err := Transition("ws", tc.h, tc.ev)
			if act != tc.act || !errors.Is(err, tc.err) {
				t.Fatalf("Action %s, err %v; want %s, %v", act, err, tc.act, tc.err)
			}
			if tc.h != nil && !equalHead(tc.h, before) {
				t.Fatalf("transition modified its input")
			}
			if next == nil {
				if tc.h != nil {
					t.Fatal("next is nil")
				}
				return
			}
			if next.Name != "ws" || next.Revision != tc.rev || !slices.Equal(next.Kept, tc.kept) {
				t.Errorf("next revision %d kept %v; want %d %v", next.Revision, next.Kept, tc.rev, tc.kept)
			}
			switch {
			case tc.step == "" && next.Step != nil:
				t.Errorf("step %+v, want none", next.Step)
			case tc.step != "" && (next.Step == nil || next.Step.State != tc.step || next.Step.Base != tc.from || next.Step.Job != tc.owner):
				t.Errorf("step %+v, want %s by %s from %v", next.Step, tc.step, tc.owner, tc.from)
			}
			if act == Write && !next.UpdatedAt.Equal(now) {
				t.Errorf("updated_at %v", next.UpdatedAt)
			}
		})
	}
}

func equalHead(a, b *jobs.WorkspaceHead) bool {
	if a.Revision != b.Revision || !slices.Equal(a.Kept, b.Kept) || (a.Step == nil) != (b.Step == nil) {
		return false
	}
	return a.Step == nil || *a.Step == *b.Step
}

// The pruned revisions' snapshots: the names the head gave them, or the
// old names of those it named none for.
func TestPruned(t *testing.T) {
	t.Parallel()
	got := Pruned(&jobs.WorkspaceHead{Name: "ws", Kept: []int64{1, 2, 3}, Snapshots: map[int64]string{2: "ws/2.t2", 3: "ws/3.t3"}},
		&jobs.WorkspaceHead{Name: "ws", Kept: []int64{3, 4}})
	if !slices.Equal(got, []string{"ws/1", "ws/2.t2"}) {
		t.Fatalf("pruned %v", got)
	}
}

// Each hold of the head has its lease: a redelivery that finds a
// running step of its job holds it anew, and from then on only it saves.
// A save names its object in the head, which forgets the names of the
// revisions it stops keeping.
func TestTransitionLeases(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	h := &jobs.WorkspaceHead{Name: "ws", Revision: 4, Kept: []int64{3, 4}, Snapshots: map[int64]string{3: "ws/3.a", 4: "ws/4.b"}}
	first, _, err := Transition("ws", h, Begin{Job: "J", Worker: "w1", Lease: "t1", Now: now})
	if err != nil || first.Step.Lease != "t1" {
		t.Fatalf("begin: %+v, %v", first.Step, err)
	}
	held, act, err := Transition("ws", first, Begin{Job: "J", Worker: "w2", Lease: "t2", Now: now})
	if err != nil || act != Write || held.Step.Lease != "t2" || held.Step.Worker != "w2" {
		t.Fatalf("hold anew: %s %+v, %v", act, held.Step, err)
	}
	if _, act, err := Transition("ws", held, Save{Job: "J", Lease: "t1", Snap: Saved{Object: "ws/5.t1"}, Keep: 2, Now: now}); !errors.Is(err, ErrNotHeld) || act != None {
		t.Fatalf("the earlier delivery's save: %s, %v; want ErrNotHeld", act, err)
	}
	if _, act, _ := Transition("ws", held, Release{Job: "J", Lease: "t1", Now: now}); act != None {
		t.Fatalf("the earlier delivery's release: %s; want none (the new holder's step stays)", act)
	}
	if next, act, _ := Transition("ws", held, Release{Job: "J", Now: now}); act != Write || next.Step != nil {
		t.Fatalf("a release of any lease (a replay's, a stored result's): %s %+v", act, next.Step)
	}
	saved, act, err := Transition("ws", held, Save{Job: "J", Lease: "t2", Snap: Saved{Object: "ws/5.t2"}, Keep: 2, Now: now})
	if err != nil || act != Write {
		t.Fatalf("the new holder's save: %s, %v", act, err)
	}
	if want := map[int64]string{4: "ws/4.b", 5: "ws/5.t2"}; !maps.Equal(saved.Snapshots, want) || saved.Snapshot(5) != "ws/5.t2" || saved.Snapshot(4) != "ws/4.b" {
		t.Fatalf("snapshots %v, want %v", saved.Snapshots, want)
	}
	if h.Snapshots[5] != "" || len(held.Snapshots) != 2 {
		t.Fatalf("transition modified its input's snapshots: %v, %v", h.Snapshots, held.Snapshots)
	}
	if (&jobs.WorkspaceHead{Name: "old"}).Snapshot(2) != fleet.SnapshotName("old", 2) {
		t.Fatal("a head naming no snapshot: not the old name")
	}
}

// A session's checkpoint moves an idle or absent head to its next
// revision outside any step; never a head a step holds, nor another
// owner's; an unchanged tree is no revision unless the head is older
// than Renew.
func TestTransitionCheckpoint(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	own := fleet.SessionWorkspace("", "s1")
	fork := &jobs.WorkspaceRef{Name: "base", Revision: 2}
	saved := func(h *jobs.WorkspaceHead) *jobs.WorkspaceHead {
		h.Revision, h.SHA256, h.Kept, h.UpdatedAt = 3, "aa", []int64{3}, now.Add(-time.Minute)
		return h
	}
	ck := func(sha string) Checkpoint {
		return Checkpoint{By: "s1", Owner: "alice", Forked: fork, Snap: Saved{Object: "o", SHA256: sha}, Keep: 5, Renew: time.Hour, Now: now}
	}
	cases := []struct {
		name  string
		ws    string
		h     *jobs.WorkspaceHead
		ev    Checkpoint
		act   Action
		err   error
		rev   int64
		owner string
	}{
		{name: "a session's own, new", ws: own, ev: ck("aa"), act: Write, rev: 1, owner: "alice"},
		{name: "a named workspace, new", ws: "ws", ev: ck("aa"), act: Write, rev: 1},
		{name: "changed", ws: own, h: saved(&jobs.WorkspaceHead{Name: own, Owner: "alice"}), ev: ck("bb"), act: Write, rev: 4, owner: "alice"},
		{name: "unchanged", ws: own, h: saved(&jobs.WorkspaceHead{Name: own, Owner: "alice"}), ev: ck("aa"), act: None, rev: 3, owner: "alice"},
		{name: "unchanged, older than Renew", ws: own, h: saved(&jobs.WorkspaceHead{Name: own, Owner: "alice", UpdatedAt: now.Add(-2 * time.Hour)}),
			ev: func() Checkpoint { c := ck("aa"); c.Renew = time.Second; return c }(), act: Write, rev: 4, owner: "alice"},
		{name: "another owner's", ws: own, h: saved(&jobs.WorkspaceHead{Name: own, Owner: "bob"}), ev: ck("bb"), act: None, err: ErrOwner, rev: 3, owner: "bob"},
		{name: "a step in flight", ws: "ws", h: &jobs.WorkspaceHead{Name: "ws", Step: &jobs.InFlight{Job: "J", State: jobs.StepRunning}},
			ev: ck("bb"), act: None, err: ErrBusy},
	}
	for _, tc := range cases {
		next, act, err := Transition(tc.ws, tc.h, tc.ev)
		if act != tc.act || !errors.Is(err, tc.err) {
			t.Errorf("%s: %s, %v; want %s, %v", tc.name, act, err, tc.act, tc.err)
			continue
		}
		if next.Revision != tc.rev || next.Owner != tc.owner || next.Step != nil && tc.err == nil {
			t.Errorf("%s: revision %d owner %q step %+v; want %d %q", tc.name, next.Revision, next.Owner, next.Step, tc.rev, tc.owner)
		}
		if tc.h == nil && (next.Forked == nil || *next.Forked != *fork) {
			t.Errorf("%s: a new head forked from %v, want %v", tc.name, next.Forked, fork)
		}
	}
}
