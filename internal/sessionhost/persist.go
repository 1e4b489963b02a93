package sessionhost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/pkg/jobs"
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
// A session whose worker is lost (its record says running, and nobody
// answers its subjects) is resumed by the next call's client: a create
// with From.Resume goes to the queue group, and the worker that takes it
// moves the record to resuming by compare-and-swap on its KV revision, so
// that of two resumers one wins and the other's worker waits for it and
// answers with its record. The old owner, should it come back, finds its
// next write of the record refused and lets its sandbox go.

// checkpointing is a live session's state of its checkpoints.
type checkpointing struct {
	mu      sync.Mutex         // one checkpoint at a time
	dirty   bool               // a call may have changed files since the last
	busy    bool               // a checkpoint runs
	ended   time.Time          // the last call's end
	retry   time.Time          // after a failed one: not before
	forked  *jobs.WorkspaceRef // a fork's source, for its workspace's first head
	pending int                // calls in flight
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
	case sessions.OpInfo, sessions.OpKeepalive, sessions.OpProcesses, sessions.OpRead, sessions.OpList, sessions.OpStat,
		sessions.OpCheckpoint, sessions.OpPause, sessions.OpDelete:
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
}

// source is a snapshot to restore: revision rev of a workspace (0: its
// head's).
type source struct {
	tenant, workspace string
	rev               int64
	// must: a missing snapshot is an error (a resume's checkpoint), not
	// an empty start.
	must bool
}

// workspaceName qualifies a workspace's name with the session's tenant.
func workspaceName(tenant, name string) string {
	if tenant == "" {
		return name
	}
	return tenant + "." + name
}

// persistOpening fills in a new session's workspace: its own (Workspace,
// else one named as the session) when it persists, restored from its head
// or from WorkspaceFrom.
func (h *Host) persistOpening(o *opening, spec sessions.Spec) error {
	if h.cfg.Workspaces == nil {
		return sessions.Errorf(sessions.ErrInvalid, "persist: this worker keeps no workspaces")
	}
	for at, name := range map[string]string{"workspace": spec.Workspace, "workspace_from.name": fromName(spec.WorkspaceFrom)} {
		if name == "" {
			continue
		}
		if strings.Contains(name, ".") {
			return sessions.Errorf(sessions.ErrInvalid, "%s: %q: a session names its tenant's workspaces without the tenant", at, name)
		}
		if _, err := jobs.ParseWorkspaceRef(name); err != nil {
			return sessions.Errorf(sessions.ErrInvalid, "%s: %v", at, err)
		}
	}
	t := spec.Tenant
	o.info.Persist = spec.Persist || spec.Workspace != ""
	if o.info.Persist {
		o.info.Workspace = workspaceName(t, cmpOr(spec.Workspace, o.info.ID))
		o.from = &source{tenant: t, workspace: o.info.Workspace}
		o.dirty = len(spec.Files) > 0
	}
	if f := spec.WorkspaceFrom; f != nil {
		o.from = &source{tenant: t, workspace: workspaceName(t, f.Name), rev: f.Revision, must: true}
		o.dirty = o.info.Persist
	}
	return nil
}

func fromName(r *jobs.WorkspaceRef) string {
	if r == nil {
		return ""
	}
	return r.Name
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// createFrom starts a session from another's checkpoint: the same one
// again (a resume), or a fork.
func (h *Host) createFrom(call sessions.Call, spec sessions.Spec) (*sessions.Info, error) {
	if !sessions.ValidID(spec.From.Session) {
		return nil, sessions.Errorf(sessions.ErrNotFound, "no session %q", spec.From.Session)
	}
	if h.cfg.Workspaces == nil {
		return nil, sessions.Errorf(sessions.ErrFailed, "this worker keeps no workspaces: it cannot resume or fork a session")
	}
	if spec.From.Resume {
		return h.resume(call, spec.From.Session)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	src, _, err := h.readRecord(ctx, spec.From.Session, call.Owner)
	if err != nil {
		return nil, err
	}
	if !src.Persist {
		return nil, sessions.Errorf(sessions.ErrInvalid, "session %s does not persist: it has no checkpoint to fork", src.ID)
	}
	id := "s-" + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", "")
	o := opening{info: sessions.Info{ID: id, Owner: call.Owner, Image: src.Image, Limits: src.Limits, Tenant: src.Tenant,
		IdleTimeout: src.IdleTimeout, MaxLifetime: src.MaxLifetime, Labels: spec.Labels, ForkedFrom: src.ID},
		env: src.Env, from: &source{tenant: src.Tenant, workspace: src.Workspace}}
	o.info.Persist = src.Persist
	if p := spec.From.Persist; p != nil {
		o.info.Persist = *p
	}
	if o.info.Persist {
		o.info.Workspace, o.dirty = workspaceName(src.Tenant, id), true
	}
	return h.open(o)
}

// readRecord returns session id's record and its KV revision, as owner
// may see it.
func (h *Host) readRecord(ctx context.Context, id, owner string) (*sessions.Info, jetstream.KeyValueEntry, error) {
	e, err := h.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, nil, sessions.Errorf(sessions.ErrNotFound, "no session %q", id)
	}
	if err != nil {
		return nil, nil, sessions.Errorf(sessions.ErrFailed, "read the session's record: %v", err)
	}
	var info sessions.Info
	if json.Unmarshal(e.Value(), &info) != nil || info.Owner != owner {
		return nil, nil, sessions.Errorf(sessions.ErrNotFound, "no session %q", id)
	}
	return &info, e, nil
}

// resumeStale is how long a resume another worker took may go on before
// it counts as dead: past a sandbox's start (2 minutes at most) and its
// restore.
const resumeStale = 3 * time.Minute

// resume starts session id again from its workspace's head, unless it
// answers already (another resumer won).
func (h *Host) resume(call sessions.Call, id string) (*sessions.Info, error) {
	deadline := time.Now().Add(resumeStale)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		info, e, err := h.readRecord(ctx, id, call.Owner)
		cancel()
		if err != nil {
			return nil, err
		}
		switch {
		case info.Status == sessions.StatusEnded:
			return nil, sessions.Errorf(sessions.ErrGone, "session %s has ended: %s", id, info.EndReason)
		case !info.Persist:
			return nil, sessions.Errorf(sessions.ErrInvalid, "session %s does not persist: it cannot be resumed", id)
		case info.Status == sessions.StatusRunning:
			if live, ok := h.ask(id, call.Owner); ok {
				return live, nil
			}
		case info.Status == sessions.StatusResuming && time.Since(info.ActiveAt) < resumeStale:
			// Another worker resumes it: wait for its record to move.
			time.Sleep(100 * time.Millisecond)
			continue
		}
		why := "lost"
		if info.Status == sessions.StatusPaused {
			why = "paused"
		}
		info.Status, info.Worker, info.ActiveAt = sessions.StatusResuming, h.cfg.Worker, time.Now().UTC()
		b, err := json.Marshal(info)
		if err != nil {
			return nil, err
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		rev, err := h.kv.Update(ctx, id, b, e.Revision())
		cancel()
		if raced(err) {
			continue // another resumer, or a call, wrote first: look again
		}
		if err != nil {
			return nil, sessions.Errorf(sessions.ErrFailed, "take the session's record: %v", err)
		}
		h.log.Info("resuming a session", "session_id", id, "why", why)
		return h.open(opening{info: *info, env: info.Env, kvRev: rev, prev: e.Value(), restore: why,
			from: &source{tenant: info.Tenant, workspace: info.Workspace, must: info.Checkpoint != nil}})
	}
	return nil, sessions.Errorf(sessions.ErrFailed, "session %s: another worker's resume did not finish within %s", id, resumeStale)
}

// ask returns the record of session id from its owner, if one answers.
func (h *Host) ask(id, owner string) (*sessions.Info, bool) {
	data, _ := json.Marshal(sessions.Call{Owner: owner})
	msg, err := h.nc.Request(sessions.Subject(id, sessions.OpInfo), data, 5*time.Second)
	if err != nil {
		return nil, false
	}
	var a sessions.Answer
	var info sessions.Info
	if json.Unmarshal(msg.Data, &a) != nil || a.Error != nil || json.Unmarshal(a.Result, &info) != nil {
		return nil, false
	}
	return &info, true
}

// giveBack puts back the record a failed resume took, so that the next
// call may try again (on another worker).
func (h *Host) giveBack(ctx context.Context, o opening) {
	if o.prev == nil {
		return
	}
	if _, err := h.kv.Update(ctx, o.info.ID, o.prev, o.kvRev); err != nil {
		h.log.Warn("putting back a session's record after a failed resume", "session_id", o.info.ID, "error", err)
	}
}

// spooled is a snapshot in an unlinked temporary file.
type spooled struct {
	f    *os.File
	size int64
	sha  string
}

func (s *spooled) close() {
	if s != nil {
		s.f.Close()
	}
}

func (s *spooled) snapshot() *jobs.Snapshot {
	if s == nil {
		return nil
	}
	return &jobs.Snapshot{R: io.NewSectionReader(s.f, 0, s.size), Size: s.size, SHA256: s.sha}
}

func (h *Host) tempFile() (*os.File, error) {
	f, err := os.CreateTemp(h.cfg.TempDir, "sandfleet-session-*")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(f.Name())
	return f, nil
}

// fetch spools the snapshot src names, and the revision it is; nil and 0
// for a workspace without one (when src need not have one).
func (h *Host) fetch(ctx context.Context, src *source) (*spooled, int64, error) {
	heads, snaps, err := h.cfg.Workspaces(ctx, src.tenant)
	if err != nil {
		return nil, 0, sessions.Errorf(sessions.ErrFailed, "open the workspaces: %v", err)
	}
	e, err := heads.Get(ctx, src.workspace)
	var head *jobs.WorkspaceHead
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
	case err != nil:
		return nil, 0, sessions.Errorf(sessions.ErrFailed, "read workspace %s: %v", src.workspace, err)
	default:
		if head, err = jobs.DecodeWorkspaceHead(src.workspace, e.Value()); err != nil {
			return nil, 0, sessions.Errorf(sessions.ErrFailed, "%v", err)
		}
	}
	rev := src.rev
	if head != nil && rev == 0 {
		rev = head.Revision
	}
	switch {
	case head == nil || head.Revision == 0:
		if src.must {
			return nil, 0, sessions.Errorf(sessions.ErrGone, "workspace %s has no revision to start from (expired or removed)", src.workspace)
		}
		return nil, 0, nil
	case rev != head.Revision && !slices.Contains(head.Kept, rev):
		return nil, 0, sessions.Errorf(sessions.ErrInvalid, "workspace_from: %s does not keep revision %d (it keeps %v)", src.workspace, rev, head.Kept)
	}
	obj, err := snaps.Get(ctx, head.Snapshot(rev))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, 0, sessions.Errorf(sessions.ErrGone, "the snapshot of %s@%d is gone (expired or removed)", src.workspace, rev)
	}
	if err != nil {
		return nil, 0, sessions.Errorf(sessions.ErrFailed, "get the snapshot of %s@%d: %v", src.workspace, rev, err)
	}
	defer obj.Close()
	f, err := h.tempFile()
	if err != nil {
		return nil, 0, sessions.Errorf(sessions.ErrFailed, "spool the snapshot: %v", err)
	}
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, sum), obj)
	if err != nil {
		f.Close()
		return nil, 0, sessions.Errorf(sessions.ErrFailed, "get the snapshot of %s@%d: %v", src.workspace, rev, err)
	}
	return &spooled{f: f, size: n, sha: hex.EncodeToString(sum.Sum(nil))}, rev, nil
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
	err := h.save(ctx, l)
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
	h.log.Info("session checkpointed", "session_id", l.info.ID, "workspace", l.info.Workspace, "revision", cp.Revision,
		"size_bytes", cp.SizeBytes, "ms", time.Since(start).Milliseconds())
	return nil
}

func (h *Host) save(ctx context.Context, l *live) error {
	info := l.snapshot()
	ws := info.Workspace
	heads, snaps, err := h.cfg.Workspaces(ctx, info.Tenant)
	if err != nil {
		return fmt.Errorf("open the workspaces: %w", err)
	}
	f, err := h.tempFile()
	if err != nil {
		return err
	}
	defer f.Close()
	rep, err := l.sb.Archive(ctx, f)
	if err != nil {
		return fmt.Errorf("archive /workspace: %w", err)
	}
	take := jobs.NewID()
	for range 5 {
		var head *jobs.WorkspaceHead
		var krev uint64
		e, err := heads.Get(ctx, ws)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
			head = &jobs.WorkspaceHead{Name: ws, Forked: l.ck.forked}
		case err != nil:
			return fmt.Errorf("read the head of %s: %w", ws, err)
		default:
			if head, err = jobs.DecodeWorkspaceHead(ws, e.Value()); err != nil {
				return err
			}
			krev = e.Revision()
		}
		if head.Step != nil {
			return fmt.Errorf("workspace %s: job %s's step is in flight", ws, head.Step.Job)
		}
		obj := jobs.SaveName(ws, head.Revision+1, take)
		if _, err := snaps.Put(ctx, jetstream.ObjectMeta{Name: obj, Metadata: map[string]string{jobs.SnapshotJobMeta: info.ID}},
			io.NewSectionReader(f, 0, rep.Bytes)); err != nil {
			return fmt.Errorf("put %s: %w", obj, err)
		}
		now := time.Now().UTC()
		next := head.WithRevision(obj, rep.Bytes, rep.Files, rep.SHA256, info.ID, h.cfg.KeepRevisions, now)
		data, err := json.Marshal(next)
		if err != nil {
			return err
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
			return fmt.Errorf("move the head of %s: %w", ws, err)
		}
		for _, r := range head.Kept {
			if !slices.Contains(next.Kept, r) {
				_ = snaps.Delete(ctx, head.Snapshot(r)) // else it expires with the TTL
			}
		}
		l.mu.Lock()
		l.info.Checkpoint = &sessions.Checkpoint{Revision: next.Revision, At: now, SizeBytes: rep.Bytes, Files: rep.Files}
		l.mu.Unlock()
		return h.record(ctx, l)
	}
	return fmt.Errorf("the head of %s kept changing", ws)
}

// pause checkpoints a persistent session and lets its sandbox go, its
// record saying paused.
func (h *Host) pause(l *live) (*sessions.Info, error) {
	if !l.info.Persist {
		return nil, sessions.Errorf(sessions.ErrInvalid, "session %s does not persist: create it with persist to pause it", l.info.ID)
	}
	if err := h.checkpoint(l); err != nil {
		return nil, sessions.Errorf(sessions.ErrFailed, "pause: the checkpoint failed, the session runs on: %v", err)
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
		return nil, sessions.Errorf(sessions.ErrInvalid, "session %s does not persist: it has no checkpoints", l.info.ID)
	}
	l.mu.Lock()
	due := l.ck.dirty || l.info.Checkpoint == nil
	l.mu.Unlock()
	if due {
		if err := h.checkpoint(l); err != nil {
			return nil, sessions.Errorf(sessions.ErrFailed, "checkpoint: %v", err)
		}
	}
	info := l.snapshot()
	return &info, nil
}
