package sessionhost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// A persistent session keeps its /workspace in a workspace (pkg/jobs): at
// each idle point, on pause and on delete, the host asks the sandbox's
// agent for an archive of it (the session's processes stopped while it
// is read) and saves it as the workspace's next revision, as a job's step
// does: the snapshot put under a name of its own, then the head moved by
// compare-and-swap on its KV revision. The session's record names the
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

// mutates reports whether a call of op may change the session's files.
func mutates(op string) bool {
	switch op {
	case sessionapi.OpInfo, sessionapi.OpKeepalive, sessionapi.OpProcesses, sessionapi.OpRead, sessionapi.OpList, sessionapi.OpStat,
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
// next revision, unless the head's revision has its digest: it returns
// the bytes archived and whether a revision was saved.
func (h *Host) save(ctx context.Context, l *live) (archived int64, saved bool, err error) {
	info := l.snapshot()
	ws := info.Workspace
	heads, snaps, err := h.cfg.Workspaces(ctx, info.Tenant)
	if err != nil {
		return 0, false, fmt.Errorf("open the workspaces: %w", err)
	}
	f, err := h.tempFile()
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	rep, err := l.sb.Archive(ctx, f)
	if err != nil {
		return 0, false, fmt.Errorf("archive /workspace: %w", err)
	}
	l.mu.Lock()
	l.ck.bytes = rep.Bytes
	l.mu.Unlock()
	take := jobs.NewID()
	for range 5 {
		head, krev, err := h.readHead(ctx, heads, l, info)
		if err != nil {
			return rep.Bytes, false, err
		}
		if head.Revision > 0 && head.SHA256 == rep.SHA256 && time.Since(head.UpdatedAt) < h.cfg.RefreshAge {
			return rep.Bytes, false, h.unchanged(ctx, l, head)
		}
		obj := fleet.SaveName(ws, head.Revision+1, take)
		if _, err := snaps.Put(ctx, jetstream.ObjectMeta{Name: obj, Metadata: map[string]string{fleet.SnapshotJobMeta: info.ID}},
			io.NewSectionReader(f, 0, rep.Bytes)); err != nil {
			return rep.Bytes, false, fmt.Errorf("put %s: %w", obj, err)
		}
		now := time.Now().UTC()
		next := records.WithRevision(head, obj, rep.Bytes, rep.Files, rep.SHA256, info.ID, h.cfg.KeepRevisions, now)
		data, err := json.Marshal(next)
		if err != nil {
			return rep.Bytes, false, err
		}
		if krev == 0 {
			_, err = heads.Create(ctx, ws, data)
		} else {
			_, err = heads.Update(ctx, ws, data, krev)
		}
		if raced(err) {
			_ = snaps.Delete(ctx, obj) // this take's alone: no head names it
			continue
		}
		if err != nil {
			_ = snaps.Delete(ctx, obj)
			return rep.Bytes, false, fmt.Errorf("move the head of %s: %w", ws, err)
		}
		for _, r := range head.Kept {
			if !slices.Contains(next.Kept, r) {
				_ = snaps.Delete(ctx, head.Snapshot(r)) // else it expires with the TTL
			}
		}
		l.mu.Lock()
		l.info.Checkpoint = &sessions.Checkpoint{Revision: next.Revision, At: now, SizeBytes: rep.Bytes, Files: rep.Files}
		l.mu.Unlock()
		return rep.Bytes, true, h.record(ctx, l)
	}
	return rep.Bytes, false, fmt.Errorf("the head of %s kept changing", ws)
}

// readHead reads the head of the session's workspace and its KV revision
// (0: none yet, a new head), free for a checkpoint: no step in flight on
// it, and, a session's own, the session's owner's.
func (h *Host) readHead(ctx context.Context, heads jetstream.KeyValue, l *live, info sessions.Info) (*jobs.WorkspaceHead, uint64, error) {
	ws := info.Workspace
	own := fleet.IsSessionWorkspace(ws)
	e, err := heads.Get(ctx, ws)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		head := &jobs.WorkspaceHead{Name: ws, Forked: l.ck.forked}
		if own {
			head.Owner = info.Owner
		}
		return head, 0, nil
	case err != nil:
		return nil, 0, fmt.Errorf("read the head of %s: %w", ws, err)
	}
	head, err := jobs.DecodeWorkspaceHead(ws, e.Value())
	switch {
	case err != nil:
		return nil, 0, err
	case own && head.Owner != info.Owner:
		return nil, 0, fmt.Errorf("workspace %s is another owner's", ws)
	case head.Step != nil:
		return nil, 0, fmt.Errorf("workspace %s: job %s's step is in flight", ws, head.Step.Job)
	}
	return head, e.Revision(), nil
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
