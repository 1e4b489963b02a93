package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/internal/workspace"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// stepMode is what a job does with a workspace.
type stepMode int

const (
	modeOutputs stepMode = iota // no workspace: only the outputs
	modeCopy                    // workspace_from alone: restore, never save
	modeFresh                   // holds running(J) under a lease: restore the base, save
	modeReplay                  // found saved(J): restore the base, save nothing
)

// wsStep is one job's use of a workspace, from holding its head to
// releasing it. A nil *wsStep is a job without workspace or outputs.
type wsStep struct {
	w      *Worker
	job    *jobs.Job
	tenant string // the job's tenant, as its message's check found it ("" for none)
	log    *slog.Logger
	mode   stepMode

	objs    fleet.ObjectStores  // the job's tenant's snapshots and artifacts
	head    *jobs.WorkspaceHead // as last written or read by this step
	headRev uint64              // its KV revision
	lease   string              // the name of this step's hold of the head
	from    *jobs.WorkspaceHead // the head of workspace_from, as resolved
	base    jobs.WorkspaceRef   // the state restored (Revision 0: empty)
	saved   bool                // the head is saved(J) (this step's save, or a replay's)

	snap            *workspace.Fetched // the base's snapshot; nil when there is none
	arch            *workspace.Spool   // the archive the launcher makes
	req             *jobrun.ArchiveRequest
	prune           []string // snapshots of the revisions the save let go, deleted once settled
	quota           string   // why the save was refused by the tenant's quota, if it was
	result          jobs.WorkspaceStep
	waitingReported bool
}

// tenantObjects returns the object stores of a tenant's snapshots and
// artifacts ("": of no tenant), creating them when this worker first
// needs them: workers know no tenants before their jobs name them. Each is
// ensured once per worker process, with the fleet-wide settings.
func (w *Worker) tenantObjects(ctx context.Context, tenant string) (fleet.ObjectStores, error) {
	if tenant == "" {
		return fleet.ObjectStores{Snapshots: w.stores.Workspaces.Snapshots, Artifacts: w.stores.Workspaces.Artifacts}, nil
	}
	w.objMu.Lock()
	o, ok := w.objects[tenant]
	w.objMu.Unlock()
	if ok {
		return o, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	o, err := w.cfg.Topology.EnsureObjects(ctx, w.js, tenant)
	if err != nil {
		return o, err
	}
	w.objMu.Lock()
	w.objects[tenant] = o
	w.objMu.Unlock()
	return o, nil
}

// beginWorkspace readies a job's workspace before it runs: it holds the
// head (waiting while another job holds it), resolves a fork's source, and
// fetches the snapshot to restore. It returns a nil step for a job without
// workspace or outputs, and why the job does not run when it does not.
func (w *Worker) beginWorkspace(stop, jobCtx context.Context, job *jobs.Job, tenant string, log *slog.Logger) (*wsStep, notRun) {
	if job.Workspace == "" && job.WorkspaceFrom == nil && len(job.Outputs) == 0 {
		return nil, notRun{}
	}
	s := &wsStep{w: w, job: job, tenant: tenant, log: log.With("workspace", job.Workspace)}
	// The job's workspaces are its tenant's (Validate checked them against
	// the subject's ID), and so are its snapshots and artifacts.
	objs, err := w.tenantObjects(jobCtx, tenant)
	var reserve *fleet.StorageReserveError
	switch {
	case errors.As(err, &reserve):
		// The fleet's storage holds no room for another tenant's quota:
		// no retry makes it, the operator does.
		return s, notRun{result: quotaResult(fmt.Sprintf("the object stores of %s cannot be made: %v", tenantName(tenant), reserve))}
	case err != nil:
		return s, s.giveBack(jobCtx, "open the object stores of "+tenantName(tenant)+": "+err.Error())
	}
	s.objs = objs
	var fork *jobs.WorkspaceRef
	if job.WorkspaceFrom != nil {
		ref, from, msg, err := w.resolveFork(jobCtx, *job.WorkspaceFrom)
		switch {
		case err != nil:
			return s, s.giveBack(jobCtx, "read the workspace to start from: "+err.Error())
		case msg != "":
			return s, notRun{result: rejected(msg)}
		}
		fork = &ref
		s.mode, s.base, s.from = modeCopy, ref, from
	}
	if job.Workspace != "" {
		if nr := s.hold(stop, jobCtx, fork); nr.halts() || jobCtx.Err() != nil {
			return s, nr
		}
	}
	if s.base.Revision > 0 {
		if nr := s.fetch(jobCtx); nr.halts() {
			return s, nr
		}
	}
	s.refreshSnapshot(jobCtx)
	if s.mode == modeFresh || len(job.Outputs) > 0 {
		s.arch = &workspace.Spool{Dir: w.cfg.TempDir}
	}
	return s, notRun{}
}

// refreshSnapshot puts the snapshot of the workspace's latest revision
// again, from the step's spool, when it is older than
// Topology.SnapshotRefreshAge: the step has just written the head (its
// hold) or is about to (its release) and may save nothing, and the head
// must not outlive its snapshot (see Topology.SnapshotTTL). A failure
// only leaves the snapshot to its age.
func (s *wsStep) refreshSnapshot(ctx context.Context) {
	if s.mode != modeFresh || s.snap == nil || s.head == nil || s.base.Name != s.job.Workspace ||
		s.base.Revision == 0 || s.base.Revision != s.head.Revision {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	obj := s.head.Snapshot(s.base.Revision)
	info, err := s.objs.Snapshots.GetInfo(ctx, obj)
	if err != nil {
		s.log.Warn("look up the snapshot to refresh", "snapshot", obj, "err", err)
		return
	}
	if time.Since(info.ModTime) < s.w.cfg.Topology.SnapshotRefreshAge() {
		return
	}
	meta := maps.Clone(info.Metadata)
	if meta == nil {
		meta = map[string]string{}
	}
	if meta[fleet.SnapshotSavedMeta] == "" {
		meta[fleet.SnapshotSavedMeta] = info.ModTime.UTC().Format(time.RFC3339Nano)
	}
	if _, err := s.objs.Snapshots.Put(ctx, jetstream.ObjectMeta{Name: obj, Metadata: meta}, s.snap.Reader()); err != nil {
		s.log.Warn("refresh the snapshot", "snapshot", obj, "err", err)
		return
	}
	s.log.Info("snapshot put again, its age renewed with the head's", "snapshot", obj, "was_put", info.ModTime)
}

// notRun is why a job does not run after all, as readying its workspace
// found: a result to store as is (the job is rejected, or its snapshot is
// gone), or a decision that gives the message back. The zero value means
// the job runs, unless its context was canceled: the caller tells why from
// the context.
type notRun struct {
	result *jobs.Result
	back   *decision
}

// halts reports that the job does not run.
func (n notRun) halts() bool { return n.result != nil || n.back != nil }

// giveBack hands the message back for a later delivery, after a failure
// that is not the job's (NATS, the worker's disk), releasing what the step
// holds.
func (s *wsStep) giveBack(ctx context.Context, reason string) notRun {
	if ctx.Err() != nil {
		return notRun{}
	}
	s.abandon()
	return notRun{back: &decision{verdict: verdictNakDelay, reason: "workspace: " + reason}}
}

func rejected(msg string) *jobs.Result {
	now := time.Now().UTC()
	return &jobs.Result{Status: jobs.StatusRejected, Error: msg, FinishedAt: &now}
}

// quotaResult is the result of a job that met a quota or a cap of the
// fleet's storage before it ran.
func quotaResult(msg string) *jobs.Result {
	now := time.Now().UTC()
	return &jobs.Result{Status: jobs.StatusError, Error: fleet.QuotaReason + ": " + msg, FinishedAt: &now}
}

// overQuota makes res, the result of a job that ran, an error naming the
// quota it met (its output and exit code stand): what it was to keep was
// not kept.
func overQuota(res *jobs.Result, msg string) {
	res.Status, res.Error = jobs.StatusError, msg
}

// tenantName names the owner of a job's stores in a message.
func tenantName(t string) string {
	if t != "" {
		return "tenant " + t
	}
	return "the jobs of no tenant"
}

// resolveFork returns the revision a job starts from and the head it was
// read from, or why the job is rejected (msg), or an error of NATS.
func (w *Worker) resolveFork(ctx context.Context, ref jobs.WorkspaceRef) (jobs.WorkspaceRef, *jobs.WorkspaceHead, string, error) {
	h, _, err := w.heads().Read(ctx, ref.Name)
	if err != nil {
		return ref, nil, "", err
	}
	// A job acts for its whole tenant: it owns no head of its own.
	rev, err := workspace.Resolve(ref.Name, h, ref.Revision, "")
	if err != nil {
		return ref, nil, "workspace_from: " + err.Error(), nil
	}
	ref.Revision = rev
	return ref, h, "", nil
}

// hold holds the job's workspace head under a lease of its own, waiting
// while another job holds it, for HoldMax at most.
func (s *wsStep) hold(stop, jobCtx context.Context, fork *jobs.WorkspaceRef) notRun {
	w, name := s.w, s.job.Workspace
	hold := time.NewTimer(w.cfg.HoldMax)
	defer hold.Stop()
	var watch jetstream.KeyWatcher
	defer func() {
		if watch != nil {
			_ = watch.Stop()
		}
	}()
	for {
		h, rev, err := w.heads().Read(jobCtx, name)
		if err != nil {
			return s.giveBack(jobCtx, "read the head: "+err.Error())
		}
		ev, err := s.begin(jobCtx, h, fork)
		if err != nil {
			return s.giveBack(jobCtx, "look up the job holding it: "+err.Error())
		}
		if err := workspace.Allows(name, h, ""); err != nil {
			return notRun{result: rejected(fmt.Sprintf("workspace: %v", err))}
		}
		next, act, err := workspace.Transition(name, h, ev)
		if err != nil {
			return notRun{result: rejected(fmt.Sprintf("workspace_from: %v", err))}
		}
		switch act {
		case workspace.Write:
			newRev, err := w.heads().Write(jobCtx, name, rev, next)
			if errors.Is(err, workspace.ErrRaced) {
				continue
			}
			if h == nil && fleet.StoreFull(err) {
				return notRun{result: rejected(workspacesFull(w.cfg.Topology, name))}
			}
			if err != nil {
				return s.giveBack(jobCtx, "hold the head: "+err.Error())
			}
			s.head, s.headRev, s.mode, s.base, s.lease = next, newRev, modeFresh, next.Step.Base, ev.Lease
			s.log.Debug("workspace held", "base", next.Step.Base.String())
			return notRun{}
		case workspace.Replay:
			s.head, s.headRev, s.mode, s.base, s.saved = h, rev, modeReplay, h.Step.Base, true
			s.log.Info("replaying a step whose revision is saved", "revision", h.Revision, "base", h.Step.Base.String())
			return notRun{}
		}
		// workspace.Wait: another job holds it.
		if !s.waitingReported {
			s.waitingReported = true
			s.log.Info("workspace busy; waiting", "holder", h.Step.Job, "state", string(h.Step.State))
		}
		if watch == nil {
			if watch, err = w.stores.Workspaces.Heads.Watch(jobCtx, name, jetstream.UpdatesOnly()); err != nil {
				watch = nil
			}
		}
		var updates <-chan jetstream.KeyValueEntry
		if watch != nil {
			updates = watch.Updates()
		}
		// A holder that ended without releasing (its worker died after
		// storing its result) changes nothing in the head: look again
		// every second.
		select {
		case <-updates:
		case <-time.After(time.Second):
		case <-jobCtx.Done():
			return notRun{}
		case <-stop.Done():
			return notRun{back: &decision{verdict: verdictNak, reason: "draining while waiting for workspace " + name}}
		case <-hold.C:
			return notRun{back: &decision{verdict: verdictNakDelay, reason: fmt.Sprintf(
				"workspace %s held by job %s for over %s", name, h.Step.Job, w.cfg.HoldMax)}}
		}
	}
}

// begin is the event of the step's hold of head h: whether the job that
// holds it is gone, looked up in RESULTS when it is another job of the
// workspace's tenant.
func (s *wsStep) begin(ctx context.Context, h *jobs.WorkspaceHead, fork *jobs.WorkspaceRef) (workspace.Begin, error) {
	ev := workspace.Begin{Job: s.job.ID, Worker: s.w.cfg.ID, Fork: fork, Lease: jobs.NewID(), Now: time.Now().UTC()}
	var err error
	switch {
	case h == nil || h.Step == nil || h.Step.Job == s.job.ID:
	case jobs.TenantOf(h.Step.Job) != jobs.TenantOf(s.job.Workspace):
		// No job of the workspace's tenant: a head a tenant forged (its
		// heads are its own to write) must not make the worker look up
		// another tenant's job for it, which would tell whether it exists.
		ev.HolderGone = true
	default:
		ev.HolderGone, err = s.w.holderGone(ctx, h.Step.Job)
	}
	return ev, err
}

// workspacesFull says why workspace name cannot be made: the bucket of
// heads is at the fleet's cap.
func workspacesFull(t fleet.Topology, name string) string {
	return fmt.Sprintf("%s: workspace %s cannot be made: the bucket %s holds the fleet's cap of %d workspaces or %s; "+
		"new workspaces can be made once others expire (after %s without a step) or are removed",
		fleet.QuotaReason, name, fleet.WorkspacesBucket, t.WorkspacesMaxKeys, limits.Size(t.WorkspacesMaxBytes), t.WorkspaceTTL)
}

// fetch copies the base's snapshot to a spool: from the worker's cache
// when this worker saved it, else from the object store.
func (s *wsStep) fetch(ctx context.Context) notRun {
	var err error
	if s.head != nil && s.base.Name == s.job.Workspace && s.base.Revision == s.head.Revision {
		k := workspace.CacheKey{Tenant: s.tenant, Workspace: s.job.Workspace, Revision: s.head.Revision, SHA256: s.head.SHA256}
		if data := s.w.snaps.Get(k); data != nil {
			if s.snap, err = workspace.Held(data, k.SHA256, s.w.cfg.TempDir); err != nil {
				return s.giveBack(ctx, "spool the snapshot: "+err.Error())
			}
			return notRun{}
		}
	}
	s.snap, err = workspace.Fetch(ctx, s.objs.Snapshots, s.baseObject(), s.w.cfg.TempDir)
	if errors.Is(err, workspace.ErrGone) {
		now := time.Now().UTC()
		return notRun{result: &jobs.Result{Status: jobs.StatusError, FinishedAt: &now, Error: fmt.Sprintf(
			"workspace: the snapshot of %s@%d is gone (expired or removed)", s.base.Name, s.base.Revision)}}
	}
	if err != nil {
		return s.giveBack(ctx, err.Error())
	}
	return notRun{}
}

// baseObject is the snapshot of the base, as the head of its workspace
// names it.
func (s *wsStep) baseObject() string {
	switch {
	case s.head != nil && s.base.Name == s.head.Name:
		return s.head.Snapshot(s.base.Revision)
	case s.from != nil && s.base.Name == s.from.Name:
		return s.from.Snapshot(s.base.Revision)
	}
	return fleet.SnapshotName(s.base.Name, s.base.Revision)
}
