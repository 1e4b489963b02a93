package worker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// quotaTopology caps each tenant's snapshots and artifacts at 1 MiB.
var quotaTopology = fleet.Topology{AckWait: 2 * time.Second, MaxJobBytes: 64 << 10, SnapshotsMaxBytes: 1 << 20, ArtifactsMaxBytes: 1 << 20}

func (b *bundle) tenant(t *testing.T, name string) *jobs.Client {
	t.Helper()
	c, err := jobs.NewTenantClient(b.js, name, clientConfig(b.topo))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func submitAndWait(t *testing.T, c *jobs.Client, j *jobs.Job) *jobs.Result {
	t.Helper()
	if j.Image == "" {
		j.Image = "python"
	}
	res, err := c.SubmitAndWait(waitCtx(t), j)
	if err != nil {
		t.Fatalf("job %s: %v", j.ID, err)
	}
	return res
}

// wantQuota checks that res is an error naming the quota and the store.
func wantQuota(t *testing.T, res *jobs.Result, store string) {
	t.Helper()
	if res.Status != jobs.StatusError || !strings.HasPrefix(res.Error, fleet.QuotaReason+": ") || !strings.Contains(res.Error, store) {
		t.Fatalf("job %s: status %s, error %q; want an error naming the quota of %s", res.ID, res.Status, res.Error, store)
	}
}

// A step whose revision does not fit in its tenant's quota of snapshots
// ends as error naming the quota and the store, its output kept and its
// revision not saved (the head stays where it was, released); the
// tenant's room comes back when it removes a workspace; another tenant's
// workspaces, and jobs, results and cancels, work on meanwhile.
func TestWorkspaceQuota(t *testing.T) {
	t.Parallel()
	b := setupWith(t, quotaTopology)
	b.startWorker(t, worker.Config{})
	a, other := b.tenant(t, "team-a"), b.tenant(t, "team-b")

	wantStep(t, submitAndWait(t, a, &jobs.Job{ID: "s1", Workspace: "agent", Code: "fill big 600000"}), 0, 1)
	res := submitAndWait(t, a, &jobs.Job{ID: "s2", Workspace: "agent", Code: "fill big2 600000\nprint ran"})
	wantQuota(t, res, "SNAPSHOTS_team-a")
	if res.Stdout != "ran\n" || res.Exit == nil || *res.Exit != 0 || res.Workspace == nil || res.Workspace.Revision != 1 ||
		!strings.Contains(res.Workspace.Error, fleet.QuotaReason) {
		t.Fatalf("the step over the quota: stdout %q, exit %v, workspace %+v", res.Stdout, res.Exit, res.Workspace)
	}
	if h := b.released(t, "team-a.agent"); h.Revision != 1 {
		t.Fatalf("head after the refused save: %+v", h)
	}

	// Another tenant's store is its own; the shared streams work on.
	wantStep(t, submitAndWait(t, other, &jobs.Job{ID: "s1", Workspace: "agent", Code: "fill big 600000"}), 0, 1)
	if res := b.step(t, &jobs.Job{ID: "plain", Code: "print ok"}); res.Status != jobs.StatusSucceeded {
		t.Fatalf("a job of no tenant: %+v", res)
	}
	if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "blocked", Image: "python", Code: "block"}); err != nil {
		t.Fatal(err)
	}
	if res, err := b.client.Cancel(waitCtx(t), "blocked"); err != nil || res.Status != jobs.StatusCanceled {
		t.Fatalf("a cancel: %v %+v", err, res)
	}

	// Room comes back with a removed workspace.
	if _, err := a.DeleteWorkspace(t.Context(), "agent"); err != nil {
		t.Fatal(err)
	}
	wantStep(t, submitAndWait(t, a, &jobs.Job{ID: "s3", Workspace: "agent2", Code: "fill big 600000"}), 0, 1)
}

// Artifacts past the tenant's quota are not stored: the job ends as
// error naming the quota, and lists each file it could not keep with the
// same reason; another tenant's artifacts are stored as before.
func TestArtifactQuota(t *testing.T) {
	t.Parallel()
	b := setupWith(t, quotaTopology)
	b.startWorker(t, worker.Config{})
	a, other := b.tenant(t, "team-a"), b.tenant(t, "team-b")
	out := []string{"*.bin"}
	if res := submitAndWait(t, a, &jobs.Job{ID: "j1", Outputs: out, Code: "fill a.bin 700000"}); res.Status != jobs.StatusSucceeded || len(res.Artifacts) != 1 {
		t.Fatalf("first job: %+v", res)
	}
	res := submitAndWait(t, a, &jobs.Job{ID: "j2", Outputs: out, Code: "fill b.bin 700000\nfill c.bin 10"})
	wantQuota(t, res, "ARTIFACTS_team-a")
	if len(res.ArtifactsSkipped) != 2 || !strings.HasPrefix(res.ArtifactsSkipped[0].Reason, fleet.QuotaReason) ||
		!strings.HasPrefix(res.ArtifactsSkipped[1].Reason, fleet.QuotaReason) || res.ArtifactsError != res.Error {
		t.Fatalf("artifacts of the job over the quota: kept %+v, skipped %+v, error %q", res.Artifacts, res.ArtifactsSkipped, res.ArtifactsError)
	}
	if res := submitAndWait(t, other, &jobs.Job{ID: "j1", Outputs: out, Code: "fill a.bin 700000"}); res.Status != jobs.StatusSucceeded || len(res.Artifacts) != 1 {
		t.Fatalf("another tenant's job: %+v", res)
	}
}

// Past WORKSPACES's cap of keys a new workspace is refused, naming the
// cap, and runs nothing; the workspaces that exist take their steps.
func TestWorkspaceKeyCap(t *testing.T) {
	t.Parallel()
	topo := quotaTopology
	topo.WorkspacesMaxKeys = 2
	b := setupWith(t, topo)
	b.startWorker(t, worker.Config{})
	wantStep(t, b.step(t, &jobs.Job{ID: "s1", Workspace: "one", Code: "write a 1"}), 0, 1)
	wantStep(t, b.step(t, &jobs.Job{ID: "s2", Workspace: "two", Code: "write a 1"}), 0, 1)
	res := b.step(t, &jobs.Job{ID: "s3", Workspace: "three", Code: "print ran"})
	if res.Status != jobs.StatusRejected || !strings.HasPrefix(res.Error, fleet.QuotaReason+": ") || !strings.Contains(res.Error, fleet.WorkspacesBucket) || b.exec.Runs("s3") != 0 {
		t.Fatalf("a workspace past the cap: %+v, runs %d", res, b.exec.Runs("s3"))
	}
	wantStep(t, b.step(t, &jobs.Job{ID: "s4", Workspace: "one", Code: "write a 2"}), 1, 2)
}

// Every cap is reserved on the server's storage: when the server has no
// room left for another tenant's quotas, that tenant's job needing them
// ends as error naming the reservation, at once, and nothing else
// breaks: the tenants whose stores exist, and the jobs and results of
// all, go on.
func TestTenantStoresBeyondTheServersStorage(t *testing.T) {
	t.Parallel()
	topo := fleet.Topology{AckWait: 2 * time.Second, MaxJobBytes: 64 << 10,
		MaxBytes: 4 << 20, ResultsMaxBytes: 4 << 20, EventsMaxBytes: 4 << 20, IndexMaxBytes: 4 << 20,
		CancelsMaxBytes: 1 << 20, WorkspacesMaxBytes: 1 << 20, SnapshotsMaxBytes: 1 << 20, ArtifactsMaxBytes: 1 << 20}
	// The shared streams, WORKERS (16 MiB) and the stores of no tenant,
	// and one tenant's two stores: not a byte more.
	reserved := int64(4*4+16+1+1+1+1)<<20 + 2<<20
	srv := natstest.ServerWith(t, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), JetStreamMaxStore: reserved})
	nc, js := natstest.Connect(t, srv.ClientURL())
	client := openClient(t, js, topo)
	b := &bundle{url: srv.ClientURL(), nc: nc, js: js, client: client, exec: &fakeexec.Executor{}, topo: topo}
	b.startWorker(t, worker.Config{})
	out := []string{"*.txt"}
	if res := submitAndWait(t, b.tenant(t, "team-a"), &jobs.Job{ID: "j1", Outputs: out, Code: "write a.txt a"}); res.Status != jobs.StatusSucceeded {
		t.Fatalf("the tenant that fits: %+v", res)
	}
	res := submitAndWait(t, b.tenant(t, "team-b"), &jobs.Job{ID: "j1", Outputs: out, Code: "write a.txt b"})
	wantQuota(t, res, "OBJ_SNAPSHOTS_team-b")
	if b.exec.Runs("team-b.j1") != 0 || res.Attempt != 1 {
		t.Fatalf("the tenant that does not fit ran %d times, attempt %d", b.exec.Runs("team-b.j1"), res.Attempt)
	}
	if res := submitAndWait(t, b.tenant(t, "team-a"), &jobs.Job{ID: "j2", Outputs: out, Code: "write a.txt again"}); res.Status != jobs.StatusSucceeded {
		t.Fatalf("the tenant that fits, after: %+v", res)
	}
	if res := b.step(t, &jobs.Job{ID: "plain", Code: "print ok"}); res.Status != jobs.StatusSucceeded {
		t.Fatalf("a job of no tenant: %+v", res)
	}
}
