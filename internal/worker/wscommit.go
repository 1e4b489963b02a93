package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/internal/workspace"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// options returns the run's workspace options, fresh for each run: the
// snapshot is read from its start, and the archive overwrites the last.
func (s *wsStep) options() jobrun.Options {
	var o jobrun.Options
	if s == nil {
		return o
	}
	if s.snap != nil {
		o.Restore = &jobrun.Snapshot{R: s.snap.Reader(), Size: s.snap.Size, SHA256: s.snap.SHA256}
	}
	if s.arch != nil {
		_ = s.arch.Reset() // a failure shows as the archive's: W fails
		s.req = &jobrun.ArchiveRequest{All: s.mode == modeFresh, Outputs: s.job.Outputs, W: s.arch}
		o.Archive = s.req
	}
	return o
}

// afterRun saves the workspace's next revision (a fresh step whose job
// ran to its own end) and stores the artifacts, and fills the result's
// workspace and artifacts. A decision is returned when NATS failed for
// longer than HoldMax: the step is then given up, unsaved, and the
// message goes back.
func (s *wsStep) afterRun(force context.Context, res *jobs.Result) *decision {
	if s == nil {
		return nil
	}
	ran := res.Status == jobs.StatusSucceeded || res.Status == jobs.StatusFailed
	s.result = jobs.WorkspaceStep{Name: s.job.Workspace, From: s.base, Revision: s.base.Revision}
	if s.base.Name != s.job.Workspace {
		s.result.Revision = 0 // a fork's source is not this workspace's revision
	}
	switch s.mode {
	case modeFresh:
		switch {
		case !ran:
			s.result.Error = fmt.Sprintf("not saved: the job ended as %s (a job saves when it ends on its own, succeeded or failed)", res.Status)
			s.refreshSnapshot(force)
		case !s.req.Complete:
			s.result.Error = "not saved: " + s.req.Err
			s.refreshSnapshot(force)
		default:
			if err := s.retry(force, s.save); err != nil {
				s.abandon()
				return &decision{verdict: verdictNakDelay, result: res, reason: "workspace: save: " + err.Error()}
			}
			if s.quota != "" {
				overQuota(res, s.quota)
			}
		}
	case modeReplay:
		h := s.head
		s.result.Revision, s.result.SizeBytes, s.result.Files, s.result.Replayed = h.Revision, h.SizeBytes, h.Files, true
	}
	if s.mode != modeOutputs {
		r := s.result
		res.Workspace = &r
	}
	if len(s.job.Outputs) > 0 {
		s.storeArtifacts(force, res, ran)
	}
	return nil
}

// save puts the archive as the next revision's snapshot and moves the
// head to it (workspace.Commit). Losing the head meanwhile (the workspace
// was removed) is no error of NATS: the result says so.
func (s *wsStep) save(ctx context.Context) error {
	c := workspace.Commit{Heads: s.w.heads(), Snaps: s.objs.Snapshots, Name: s.job.Workspace, Lease: s.lease, By: s.job.ID,
		Event: func(_ *jobs.WorkspaceHead, saved workspace.Saved) any {
			return workspace.Save{Job: s.job.ID, Lease: s.lease, Snap: saved, Keep: s.w.cfg.KeepRevisions, Now: time.Now().UTC()}
		}}
	m, err := c.Run(ctx, s.arch.Reader(s.req.Bytes), workspace.Saved{SizeBytes: s.req.Bytes, Files: s.req.Files, SHA256: s.req.SHA256})
	switch {
	case fleet.StoreFull(err):
		// No retry makes room: the tenant does, by removing workspaces,
		// or the TTL.
		s.quota = fmt.Sprintf("%s: the workspace snapshots of %s (object store %s) are at their quota of %s: revision %d of %s (%s) was not saved; "+
			"remove workspaces (submit workspace rm) to make room", fleet.QuotaReason, tenantName(s.tenant), fleet.SnapshotsBucketOf(s.tenant),
			limits.Size(s.w.cfg.Topology.SnapshotsMaxBytes), s.head.Revision+1, s.job.Workspace, limits.Size(s.req.Bytes))
		s.result.Error = "not saved: " + s.quota
		return nil
	case errors.Is(err, workspace.ErrNotHeld):
		s.result.Error = "not saved: the workspace was removed, or another delivery of the job held it, while the job ran"
		return nil
	case err != nil:
		return err
	}
	s.prune = workspace.Pruned(m.Before, m.Head)
	s.committed(m.Head, m.Rev)
	return nil
}

// committed records that the head moved to next (at KV revision rev) by
// this step's save.
func (s *wsStep) committed(next *jobs.WorkspaceHead, rev uint64) {
	if data, ok := s.arch.Memory(s.req.Bytes); ok {
		s.w.snaps.Put(workspace.CacheKey{Tenant: s.tenant, Workspace: s.job.Workspace, Revision: next.Revision, SHA256: s.req.SHA256}, data)
	}
	s.head, s.headRev, s.saved = next, rev, true
	s.result.Revision, s.result.SizeBytes, s.result.Files = next.Revision, s.req.Bytes, s.req.Files
	s.result.Skipped, s.result.SkippedMore = s.req.Skips, max(s.req.Skipped-len(s.req.Skips), 0)
	s.log.Info("workspace saved", "revision", next.Revision, "size_bytes", s.req.Bytes, "files", s.req.Files)
}

// settled ends the step once the message is settled: a stored result
// (ack, term) releases the head; a message handed back keeps a saved step
// for its replay and releases one that saved nothing.
func (s *wsStep) settled(d decision) {
	if s == nil {
		return
	}
	// The revisions a committed save let go are gone from the head either
	// way: a replay saves nothing and would not delete them.
	defer s.deletePruned()
	if d.verdict == verdictAck || d.verdict == verdictTerm {
		s.release()
		return
	}
	s.abandon()
}

// deletePruned deletes the snapshots of the revisions the save let go,
// after the result: they are no part of the step's commit, and a failure
// leaves them to expire with the TTL.
func (s *wsStep) deletePruned() {
	if len(s.prune) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, obj := range s.prune {
		if err := s.objs.Snapshots.Delete(ctx, obj); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			s.log.Warn("prune an old snapshot; it expires with the TTL", "snapshot", obj, "err", err)
		}
	}
	s.prune = nil
}

// abandon gives the step up: a step that saved nothing releases the head,
// so that the next job need not wait for this one's redelivery.
func (s *wsStep) abandon() {
	if s != nil && s.mode == modeFresh && !s.saved {
		s.release()
	}
}

// release removes the job's step from the head, if it is still there.
func (s *wsStep) release() {
	if s == nil || (s.mode != modeFresh && s.mode != modeReplay) {
		return
	}
	// A replay's lease is "": it holds nothing of its own, and releases
	// the step.
	s.w.releaseHead(s.job.Workspace, s.job.ID, s.lease, s.log)
	s.mode = modeCopy // released: nothing more to do
}

// close removes the step's temporary files.
func (s *wsStep) close() {
	if s == nil {
		return
	}
	s.snap.Close()
	s.arch.Close()
}

// retry runs op with back-off until it succeeds, HoldMax passes or force.
func (s *wsStep) retry(force context.Context, op func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(force, s.w.cfg.HoldMax)
	defer cancel()
	return backoff.Retry(func() error {
		octx, ocancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer ocancel()
		err := op(octx)
		if err != nil {
			s.log.Warn("workspace", "err", err)
		}
		return err
	}, backoff.WithContext(s.w.cfg.Backoff(), ctx))
}
