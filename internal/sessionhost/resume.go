package sessionhost

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/internal/sessionwire"
	"github.com/sandfleet/sandfleet/internal/workspace"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// A session whose worker is lost (its record says running, and nobody
// answers its subjects) is resumed by the next call's client: a create
// with From.Resume goes to the queue group, and the worker that takes it
// moves the record to resuming by compare-and-swap on its KV revision, so
// that of two resumers one wins and the other's worker waits for it and
// answers with its record. The old owner, should it come back, finds its
// next write of the record refused and lets its sandbox go.

// source is a snapshot to restore: revision rev of a workspace (0: its
// head's).
type source struct {
	tenant, workspace string
	// owner: whose session restores it, for the owner rule
	// (workspace.Allows): a head that names another owner is refused.
	owner string
	rev   int64
	// must: a missing revision is an error (a resume's checkpoint), not
	// an empty start.
	must bool
	// named: the caller named the workspace to start from
	// (workspace_from): it must exist, but may have no revision yet (an
	// empty start, as a job's workspace_from).
	named bool
}

// workspaceName qualifies a workspace's name with the session's tenant.
func workspaceName(tenant, name string) string {
	if tenant == "" {
		return name
	}
	return tenant + "." + name
}

// persistOpening fills in a new session's workspace when it persists: the
// tenant's workspace it names (Workspace), shared as a job's, or else its
// own (fleet.SessionWorkspace), which no caller can name; restored from
// its head or from WorkspaceFrom.
func (h *Host) persistOpening(o *opening, spec sessions.Spec) error {
	if h.cfg.Workspaces == nil {
		return sessionapi.Errorf(sessionapi.ErrInvalid, "persist: this worker keeps no workspaces")
	}
	for at, name := range map[string]string{"workspace": spec.Workspace, "workspace_from.name": fromName(spec.WorkspaceFrom)} {
		if name == "" {
			continue
		}
		if strings.Contains(name, ".") {
			return sessionapi.Errorf(sessionapi.ErrInvalid, "%s: %q: a session names its tenant's workspaces without the tenant", at, name)
		}
		if _, err := jobs.ParseWorkspaceRef(name); err != nil {
			return sessionapi.Errorf(sessionapi.ErrInvalid, "%s: %v", at, err)
		}
	}
	t := spec.Tenant
	o.info.Persist = spec.Persist || spec.Workspace != ""
	if o.info.Persist {
		o.info.Workspace = fleet.SessionWorkspace(t, o.info.ID)
		if spec.Workspace != "" {
			o.info.Workspace = workspaceName(t, spec.Workspace)
		}
		o.from = &source{tenant: t, workspace: o.info.Workspace, owner: o.info.Owner}
		o.dirty = len(spec.Files) > 0
	}
	if f := spec.WorkspaceFrom; f != nil {
		o.from = &source{tenant: t, workspace: workspaceName(t, f.Name), owner: o.info.Owner, rev: f.Revision, named: true}
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

// createFrom starts a session from another's checkpoint: the same one
// again (a resume), or a fork.
func (h *Host) createFrom(call sessionwire.Call, spec sessions.Spec) (*sessions.Info, error) {
	if !sessions.ValidID(spec.From.Session) {
		return nil, sessionapi.Errorf(sessionapi.ErrNotFound, "no session %q", spec.From.Session)
	}
	if h.cfg.Workspaces == nil {
		return nil, sessionapi.Errorf(sessionapi.ErrFailed, "this worker keeps no workspaces: it cannot resume or fork a session")
	}
	if spec.From.Resume {
		return h.resume(call, spec.From.Session)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	src, _, err := h.readRecord(ctx, spec.From.Session, call)
	if err != nil {
		return nil, err
	}
	if !src.Persist {
		return nil, sessionapi.Errorf(sessionapi.ErrInvalid, "session %s does not persist: it has no checkpoint to fork", src.ID)
	}
	id := "s-" + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", "")
	o := opening{key: sessionwire.Key(call.Tenant, call.Owner, id), info: sessions.Info{ID: id, Owner: call.Owner, Image: src.Image, Limits: src.Limits, Tenant: src.Tenant,
		IdleTimeout: src.IdleTimeout, MaxLifetime: src.MaxLifetime, Labels: spec.Labels, ForkedFrom: src.ID},
		env: src.Env, from: &source{tenant: src.Tenant, workspace: src.Workspace, owner: src.Owner}}
	o.info.Persist = src.Persist
	if p := spec.From.Persist; p != nil {
		o.info.Persist = *p
	}
	if o.info.Persist {
		o.info.Workspace, o.dirty = fleet.SessionWorkspace(src.Tenant, id), true
	}
	return h.open(o)
}

// readRecord returns session id's record and its KV entry, as the
// caller (its owner, of its tenant) may see it.
func (h *Host) readRecord(ctx context.Context, id string, call sessionwire.Call) (*sessions.Info, jetstream.KeyValueEntry, error) {
	info, e, err := sessions.ReadRecord(ctx, h.kv, call.Tenant, call.Owner, id)
	if err != nil && sessionapi.AsError(err) == nil {
		return nil, nil, sessionapi.Errorf(sessionapi.ErrFailed, "read the session's record: %v", err)
	}
	return info, e, err
}

// resumeStale is how long a resume another worker took may go on before
// it counts as dead: past a sandbox's start (2 minutes at most) and its
// restore.
const resumeStale = 3 * time.Minute

// resume starts session id again from its workspace's head, unless it
// answers already (another resumer won).
func (h *Host) resume(call sessionwire.Call, id string) (*sessions.Info, error) {
	deadline := time.Now().Add(resumeStale)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		info, e, err := h.readRecord(ctx, id, call)
		cancel()
		if err != nil {
			return nil, err
		}
		switch {
		case info.Status == sessions.StatusEnded:
			return nil, sessionapi.Errorf(sessionapi.ErrGone, "session %s has ended: %s", id, info.EndReason)
		case !info.Persist:
			return nil, sessionapi.Errorf(sessionapi.ErrInvalid, "session %s does not persist: it cannot be resumed", id)
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
		} else if err := h.endUnresumable(e.Key(), info, e.Revision()); fleet.Raced(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		info.Status, info.Worker, info.ActiveAt = sessions.StatusResuming, h.cfg.Worker, time.Now().UTC()
		b, err := json.Marshal(info)
		if err != nil {
			return nil, err
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		rev, err := h.kv.Update(ctx, e.Key(), b, e.Revision())
		cancel()
		if fleet.Raced(err) {
			continue // another resumer, or a call, wrote first: look again
		}
		if err != nil {
			return nil, sessionapi.Errorf(sessionapi.ErrFailed, "take the session's record: %v", err)
		}
		h.log.Info("resuming a session", "session_id", id, "why", why)
		return h.open(opening{key: e.Key(), info: *info, env: info.Env, kvRev: rev, prev: e.Value(), restore: why,
			from: &source{tenant: info.Tenant, workspace: info.Workspace, owner: info.Owner, must: info.Checkpoint != nil}})
	}
	return nil, sessionapi.Errorf(sessionapi.ErrFailed, "session %s: another worker's resume did not finish within %s", id, resumeStale)
}

// endUnresumable records a lost session that has nothing to start from
// as ended (it ended with its sandbox) and returns ErrGone, or the error
// of the record's compare-and-swap on rev; nil when it may be resumed.
func (h *Host) endUnresumable(key string, info *sessions.Info, rev uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if h.resumable(ctx, info) {
		return nil
	}
	if err := h.endLost(ctx, key, info, rev); err != nil {
		return err
	}
	return sessionapi.Errorf(sessionapi.ErrGone, "session %s has ended: %s (its worker was lost before its first checkpoint)", info.ID, sessions.EndLost)
}

// ask returns the record of session id from its owner, if one answers.
func (h *Host) ask(id, owner string) (*sessions.Info, bool) {
	data, _ := json.Marshal(sessionwire.Call{Owner: owner})
	msg, err := h.nc.Request(sessions.Subject(id, sessionapi.OpInfo), data, 5*time.Second)
	if err != nil {
		return nil, false
	}
	var a sessionwire.Answer
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
	if _, err := h.kv.Update(ctx, o.key, o.prev, o.kvRev); err != nil {
		h.log.Warn("putting back a session's record after a failed resume", "session_id", o.info.ID, "error", err)
	}
}

// restoring is what a session restores from a fetched snapshot.
func restoring(f *workspace.Fetched) *jobrun.Snapshot {
	if f == nil {
		return nil
	}
	return &jobrun.Snapshot{R: f.Reader(), Size: f.Size, SHA256: f.SHA256}
}

// fetch spools the snapshot src names, and the revision it is; nil and 0
// for a workspace without one (when src need not have one).
func (h *Host) fetch(ctx context.Context, src *source) (*workspace.Fetched, int64, error) {
	heads, snaps, err := h.cfg.Workspaces(ctx, src.tenant)
	if err != nil {
		return nil, 0, sessionapi.Errorf(sessionapi.ErrFailed, "open the workspaces: %v", err)
	}
	head, _, err := workspace.Heads{KV: heads}.Read(ctx, src.workspace)
	if err != nil {
		return nil, 0, sessionapi.Errorf(sessionapi.ErrFailed, "%v", err)
	}
	rev, err := workspace.Resolve(src.workspace, head, src.rev, src.owner)
	switch {
	case errors.Is(err, workspace.ErrOwner):
		return nil, 0, sessionapi.Errorf(sessionapi.ErrNotFound, "%v", err)
	case errors.Is(err, workspace.ErrNotKept):
		return nil, 0, sessionapi.Errorf(sessionapi.ErrInvalid, "workspace_from: %v", err)
	case err == nil && rev > 0:
	case src.must || (src.named && head == nil):
		return nil, 0, sessionapi.Errorf(sessionapi.ErrGone, "workspace %s has no revision to start from (expired or removed)", src.workspace)
	default:
		return nil, 0, nil // nothing saved yet: an empty start
	}
	f, err := workspace.Fetch(ctx, snaps, head.Snapshot(rev), h.cfg.TempDir)
	switch {
	case errors.Is(err, workspace.ErrGone):
		return nil, 0, sessionapi.Errorf(sessionapi.ErrGone, "the snapshot of %s@%d is gone (expired or removed)", src.workspace, rev)
	case err != nil:
		return nil, 0, sessionapi.Errorf(sessionapi.ErrFailed, "%s@%d: %v", src.workspace, rev, err)
	}
	return f, rev, nil
}
