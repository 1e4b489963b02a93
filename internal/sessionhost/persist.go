package sessionhost

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandfleet/sandfleet/internal/workspace"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// A persistent session keeps its /workspace in a workspace (pkg/jobs): at
// each idle point, on pause and on delete, the host asks the sandbox's
// agent for an archive of it (the session's processes stopped while it
// is read) and saves it as the workspace's next revision by the commit a
// job's step makes (package workspace): the snapshot put under a name of
// its own, then the head moved by compare-and-swap on its KV revision. The session's record names the
// last one (Info.Checkpoint).
//
// An idle point is CheckpointQuiet without a call after a call that may
// have changed files: an agent's calls come in bursts with its thinking
// between them, so one archive per burst costs a tar where one per call
// would cost one each, and what a lost worker loses is at most the last
// burst. A background process's writes after the last idle point are in
// the next checkpoint.
//
// A checkpoint whose archive has the digest of the head's revision (the
// tree did not change: the archive of a tree is the same bytes, its
// entries in the order of their names, each with its mode, size, contents
// and modification time to the second) saves nothing, unless the head is
// older than RefreshAge: a revision saved then renews the workspace's and
// its snapshot's lifetimes, as a job's step does. The bytes a
// session's checkpoints archive over time are bounded for the session and
// for its tenant on this worker (ckrate.go).

// checkpointing is a live session's state of its checkpoints.
type checkpointing struct {
	mu      sync.Mutex         // one checkpoint at a time
	dirty   bool               // a call may have changed files since the last
	busy    bool               // a checkpoint runs
	ended   time.Time          // the last call's end
	retry   time.Time          // after a failed one: not before
	forked  *jobs.WorkspaceRef // a fork's source, for its workspace's first head
	pending int                // calls in flight
	bytes   int64              // the last archive's size: what the next is expected to cost
	rate    bucket             // the session's checkpoint bytes over time (ckrate.go)
}

// errTakenOver: the session's record was written by another (a resume).
var errTakenOver = errors.New("the session was taken over")

// mutates reports whether a call of op may change the session's files.
func mutates(op string) bool {
	switch op {
	case sessionapi.OpInfo, sessionapi.OpKeepalive, sessionapi.OpProcesses, sessionapi.OpContexts, sessionapi.OpRead, sessionapi.OpList, sessionapi.OpStat,
		sessionapi.OpCheckpoint, sessionapi.OpPause, sessionapi.OpDelete:
		return false
	}
	return true
}

// callStarted and callEnded keep the count of a session's calls in flight
// and whether they may have changed its files.
func (l *live) callStarted(op string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ck.pending++
	if l.info.Persist && mutates(op) {
		l.ck.dirty = true
	}
}

func (l *live) callEnded() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ck.pending--
	l.ck.ended = time.Now()
	l.active = l.ck.ended.UTC()
}

// idlePoint reports whether a persistent session is due a checkpoint:
// changed, and quiet for CheckpointQuiet.
func (h *Host) idlePoint(l *live, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := &l.ck
	return l.info.Persist && c.dirty && !c.busy && c.pending == 0 && now.Sub(c.ended) >= h.cfg.CheckpointQuiet && !now.Before(c.retry)
}

func (h *Host) checkpointIdle(l *live) {
	l.mu.Lock()
	l.ck.busy = true
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.ck.busy = false
		l.mu.Unlock()
	}()
	now := time.Now()
	if d := h.checkpointWait(l, now); d > 0 {
		l.mu.Lock()
		l.ck.retry = now.Add(d)
		l.mu.Unlock()
		h.log.Info("a session's checkpoint waits for its bound", "session_id", l.info.ID, "wait_ms", d.Milliseconds())
		return
	}
	if err := h.checkpoint(l); errors.Is(err, errTakenOver) {
		h.finish(l, nil)
	}
}

// checkpointIfDirty checkpoints a persistent session that changed since
// its last checkpoint, or never had one.
func (h *Host) checkpointIfDirty(l *live) {
	l.mu.Lock()
	due := l.info.Persist && !l.ended && (l.ck.dirty || l.info.Checkpoint == nil)
	l.mu.Unlock()
	if due {
		_ = h.checkpoint(l)
	}
}

// checkpoint saves the session's /workspace as its workspace's next
// revision, and records it.
func (h *Host) checkpoint(l *live) error {
	l.ck.mu.Lock()
	defer l.ck.mu.Unlock()
	l.mu.Lock()
	l.ck.dirty = false // a call from now on makes it dirty again
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	archived, saved, err := h.save(ctx, l)
	h.spendCheckpoint(l, archived)
	if err != nil {
		l.mu.Lock()
		l.ck.dirty, l.ck.retry = true, time.Now().Add(10*time.Second)
		l.mu.Unlock()
		if !errors.Is(err, errTakenOver) {
			h.log.Warn("a session's checkpoint failed; it tries again at its next idle point", "session_id", l.info.ID, "error", err)
		}
		return err
	}
	cp := l.snapshot().Checkpoint
	if !saved {
		h.log.Info("session checkpoint unchanged", "session_id", l.info.ID, "revision", cp.Revision, "archived_bytes", archived)
		return nil
	}
	h.log.Info("session checkpointed", "session_id", l.info.ID, "workspace", l.info.Workspace, "revision", cp.Revision,
		"size_bytes", cp.SizeBytes, "ms", time.Since(start).Milliseconds())
	return nil
}

// save archives the session's /workspace and saves it as its workspace's
// next revision (workspace.Commit), unless the head's revision has its
// digest: it returns the bytes archived and whether a revision was saved.
func (h *Host) save(ctx context.Context, l *live) (archived int64, saved bool, err error) {
	info := l.snapshot()
	ws := info.Workspace
	heads, snaps, err := h.cfg.Workspaces(ctx, info.Tenant)
	if err != nil {
		return 0, false, fmt.Errorf("open the workspaces: %w", err)
	}
	sp := &workspace.Spool{Dir: h.cfg.TempDir}
	defer sp.Close()
	rep, err := l.sb.Archive(ctx, sp)
	if err != nil {
		return 0, false, fmt.Errorf("archive /workspace: %w", err)
	}
	l.mu.Lock()
	l.ck.bytes = rep.Bytes
	forked := l.ck.forked
	l.mu.Unlock()
	now := time.Now().UTC()
	c := workspace.Commit{Heads: workspace.Heads{KV: heads}, Snaps: snaps, Name: ws, Lease: jobs.NewID(), By: info.ID,
		Event: func(_ *jobs.WorkspaceHead, s workspace.Saved) any {
			return workspace.Checkpoint{By: info.ID, Owner: info.Owner, Forked: forked, Snap: s, Keep: h.cfg.KeepRevisions, Renew: h.cfg.RefreshAge, Now: now}
		}}
	m, err := c.Run(ctx, sp.Reader(rep.Bytes), workspace.Saved{SizeBytes: rep.Bytes, Files: rep.Files, SHA256: rep.SHA256})
	switch {
	case err != nil:
		return rep.Bytes, false, err
	case m.Action != workspace.Write:
		return rep.Bytes, false, h.unchanged(ctx, l, m.Head)
	}
	for _, obj := range workspace.Pruned(m.Before, m.Head) {
		_ = snaps.Delete(ctx, obj) // else it expires with the TTL
	}
	l.mu.Lock()
	l.info.Checkpoint = &sessions.Checkpoint{Revision: m.Head.Revision, At: now, SizeBytes: rep.Bytes, Files: rep.Files}
	l.mu.Unlock()
	return rep.Bytes, true, h.record(ctx, l)
}

// unchanged records the head's revision as the session's checkpoint, when
// it is not yet (a session restored from a workspace it names).
func (h *Host) unchanged(ctx context.Context, l *live, head *jobs.WorkspaceHead) error {
	l.mu.Lock()
	cp := l.info.Checkpoint
	same := cp != nil && cp.Revision == head.Revision
	if !same {
		l.info.Checkpoint = &sessions.Checkpoint{Revision: head.Revision, At: head.UpdatedAt, SizeBytes: head.SizeBytes, Files: head.Files}
	}
	l.mu.Unlock()
	if same {
		return nil
	}
	return h.record(ctx, l)
}

// pause checkpoints a persistent session and lets its sandbox go, its
// record saying paused.
func (h *Host) pause(l *live) (*sessions.Info, error) {
	if !l.info.Persist {
		return nil, sessionapi.Errorf(sessionapi.ErrInvalid, "session %s does not persist: create it with persist to pause it", l.info.ID)
	}
	if err := h.checkpoint(l); err != nil {
		return nil, sessionapi.Errorf(sessionapi.ErrFailed, "pause: the checkpoint failed, the session runs on: %v", err)
	}
	h.finish(l, func(i *sessions.Info, now time.Time) {
		i.Status, i.PausedAt = sessions.StatusPaused, &now
	})
	info := l.snapshot()
	return &info, nil
}

// checkpointNow serves OpCheckpoint: a checkpoint when the session
// changed since its last, and its record.
func (h *Host) checkpointNow(l *live) (*sessions.Info, error) {
	if !l.info.Persist {
		return nil, sessionapi.Errorf(sessionapi.ErrInvalid, "session %s does not persist: it has no checkpoints", l.info.ID)
	}
	l.mu.Lock()
	due := l.ck.dirty || l.info.Checkpoint == nil
	l.mu.Unlock()
	if due {
		if d := h.checkpointWait(l, time.Now()); d > 0 {
			return nil, sessionapi.Errorf(sessionapi.ErrLimit, "checkpoint: session %s is over its checkpoints' bound (%s); the next may run in %s",
				l.info.ID, h.cfg.checkpointRule(), d.Round(time.Second))
		}
		if err := h.checkpoint(l); err != nil {
			return nil, sessionapi.Errorf(sessionapi.ErrFailed, "checkpoint: %v", err)
		}
	}
	info := l.snapshot()
	return &info, nil
}
