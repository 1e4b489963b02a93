package worker_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// publishRaw publishes a job's JSON on the subject of id, as a bare
// client would (no client-side checks), and waits for its result.
func (b *bundle) publishRaw(t *testing.T, id, job string) *jobs.Result {
	t.Helper()
	watch, err := b.client.Watch(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	if _, err := b.js.Publish(t.Context(), fleet.Subject("default", id), []byte(job)); err != nil {
		t.Fatal(err)
	}
	res, err := watch.Next(waitCtx(t))
	if err != nil {
		t.Fatalf("job %s: %v", id, err)
	}
	return res
}

// A tenant's workspaces are its own: its jobs name them <tenant>.<name>,
// their snapshots and its jobs' artifacts go to object stores of its own;
// a job of another tenant, or of none, naming them (workspace or
// workspace_from), or a tenant's job naming a workspace of no tenant, is
// rejected naming the field, runs nothing and leaves the head as it was.
func TestWorkspaceTenants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{ID: "w1"})

	// Through team-a's client: the names are qualified for it.
	clientA, err := jobs.NewTenantClient(b.js, "team-a", clientConfig(b.topo))
	if err != nil {
		t.Fatal(err)
	}
	res, err := clientA.SubmitAndWait(waitCtx(t), &jobs.Job{ID: "s1", Image: "python", Workspace: "agent", Outputs: []string{"*.png"},
		Code: "write notes.txt secret of a\nwrite plot.png PNG"})
	if err != nil {
		t.Fatal(err)
	}
	wantStep(t, res, 0, 1)
	if res.ID != "team-a.s1" || res.Workspace.Name != "team-a.agent" || len(res.Artifacts) != 1 || !strings.HasPrefix(res.Artifacts[0].Key, "team-a.s1/") {
		t.Fatalf("tenant a's step: %+v %+v", res.Workspace, res.Artifacts)
	}
	plot := res.Artifacts[0].Key
	wantStep(t, b.publishRaw(t, "team-a.s2", `{"image":"python","code":"append notes.txt two","workspace":"team-a.agent"}`), 1, 2)
	before := b.released(t, "team-a.agent")

	// Where they are: a's own object stores, not the fleet's.
	ctx := t.Context()
	objsA, err := b.topo.EnsureObjects(ctx, b.js, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := objsA.Snapshots.GetInfo(ctx, before.Snapshot(2)); err != nil {
		t.Errorf("a's snapshot in %s: %v", fleet.SnapshotsBucketOf("team-a"), err)
	}
	if _, err := objsA.Artifacts.GetInfo(ctx, plot); err != nil {
		t.Errorf("a's artifact in %s: %v", fleet.ArtifactsBucketOf("team-a"), err)
	}
	shared := b.workspaces(t)
	if _, err := shared.Snapshots.GetInfo(ctx, before.Snapshot(2)); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Errorf("a's snapshot in the fleet's %s: %v", fleet.SnapshotsBucket, err)
	}
	if _, err := shared.Artifacts.GetInfo(ctx, plot); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Errorf("a's artifact in the fleet's %s: %v", fleet.ArtifactsBucket, err)
	}

	for _, tc := range []struct {
		id, job, field string
	}{
		{"team-b.steal", `{"image":"python","code":"cat notes.txt","workspace":"team-a.agent"}`, "workspace"},
		{"team-b.fork", `{"image":"python","code":"cat notes.txt","workspace":"team-b.mine","workspace_from":{"name":"team-a.agent"}}`, "workspace_from.name"},
		{"team-b.copy", `{"image":"python","code":"cat notes.txt","workspace_from":{"name":"team-a.agent","revision":1}}`, "workspace_from.name"},
		{"team-b.bare", `{"image":"python","code":"cat notes.txt","workspace":"agent"}`, "workspace"},
		{"team-b.bare-from", `{"image":"python","code":"cat notes.txt","workspace_from":{"name":"agent"}}`, "workspace_from.name"},
		{"untenanted", `{"image":"python","code":"cat notes.txt","workspace":"team-a.agent"}`, "workspace"},
		{"untenanted-from", `{"image":"python","code":"cat notes.txt","workspace_from":{"name":"team-a.agent"}}`, "workspace_from.name"},
	} {
		res := b.publishRaw(t, tc.id, tc.job)
		if res.Status != jobs.StatusRejected || !strings.HasPrefix(strings.TrimPrefix(res.Error, jobs.ErrInvalidJob.Error()+": "), tc.field+":") {
			t.Errorf("%s %s: %s %q, want rejected naming %s", tc.id, tc.job, res.Status, res.Error, tc.field)
		}
		if strings.Contains(res.Stdout, "secret") || b.exec.Runs(tc.id) != 0 {
			t.Errorf("%s ran: %q", tc.id, res.Stdout)
		}
	}
	if h := b.head(t, "team-a.agent"); h.Revision != before.Revision || h.Job != before.Job || h.Step != nil {
		t.Errorf("a's head moved: %+v, was %+v", h, before)
	}

	// The clients refuse them before publishing, too.
	clientB, err := jobs.NewTenantClient(b.js, "team-b", clientConfig(b.topo))
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []*jobs.Job{
		{Image: "python", Code: "x", Workspace: "team-a.agent"},
		{Image: "python", Code: "x", WorkspaceFrom: &jobs.WorkspaceRef{Name: "team-a.agent"}},
	} {
		if _, err := clientB.Submit(ctx, j); !errors.Is(err, jobs.ErrInvalidJob) {
			t.Errorf("b's client submitting %+v: %v", j, err)
		}
		if _, err := b.client.Submit(ctx, j); !errors.Is(err, jobs.ErrInvalidJob) {
			t.Errorf("the operator's client submitting %+v: %v", j, err)
		}
	}
	// b's own workspace of the same name is another.
	res, err = clientB.SubmitAndWait(waitCtx(t), &jobs.Job{ID: "own", Image: "python", Workspace: "agent", Code: "cat notes.txt"})
	if err != nil {
		t.Fatal(err)
	}
	wantStep(t, res, 0, 1)
	if res.Workspace.Name != "team-b.agent" || strings.Contains(res.Stdout, "secret") {
		t.Fatalf("b's own agent: %+v %q", res.Workspace, res.Stdout)
	}
}

// A tenant writes its own heads: one naming another tenant's job as the
// holder must not make the worker look that job up for it (whether the
// step waits would tell the tenant that the job exists). The holder is
// taken as gone, and the step runs at once, while the named job of team-b
// sits queued.
func TestForgedHeadNamingAnotherTenantsJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{ID: "w1"})
	// team-b's job, queued where no worker takes it.
	data := []byte(`{"image":"python","code":"print b","queue":"nobody"}`)
	if _, err := b.js.Publish(t.Context(), fleet.Subject("nobody", "team-b.secret"), data); err != nil {
		t.Fatal(err)
	}
	forged := jobs.WorkspaceHead{Name: "team-a.w2", Step: &jobs.InFlight{Job: "team-b.secret", State: jobs.StepRunning,
		Base: jobs.WorkspaceRef{Name: "team-a.w2"}, Worker: "w0"}}
	v, _ := json.Marshal(forged)
	if _, err := b.workspaces(t).Heads.Put(t.Context(), "team-a.w2", v); err != nil {
		t.Fatal(err)
	}
	res := b.publishRaw(t, "team-a.probe", `{"image":"python","code":"write f 1","workspace":"team-a.w2"}`)
	wantStep(t, res, 0, 1)
}

// The duplicate window of JOBS spans every tenant: a publish of team-a's
// whose Nats-Msg-Id is team-b's job ID must not make team-b's Submit of
// that ID be dropped. Submit sets no Nats-Msg-Id (one message per subject
// keeps a job from being queued twice).
func TestAnotherTenantsMsgIDDropsNoJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{ID: "w1"})
	decoy := []byte(`{"image":"python","code":"print a","queue":"nobody"}`)
	if _, err := b.js.Publish(t.Context(), fleet.Subject("nobody", "team-a.decoy"), decoy, jetstream.WithMsgID("team-b.nightly")); err != nil {
		t.Fatal(err)
	}
	clientB, err := jobs.NewTenantClient(b.js, "team-b", clientConfig(b.topo))
	if err != nil {
		t.Fatal(err)
	}
	res, err := clientB.SubmitAndWait(waitCtx(t), &jobs.Job{ID: "nightly", Image: "python", Code: "print b"})
	if err != nil || res.Status != jobs.StatusSucceeded {
		t.Fatalf("team-b's job after team-a's decoy: %+v, %v", res, err)
	}
}

// A head that names an owner is that owner's alone, for jobs as for
// sessions (package workspace, Allows): a job, acting for its whole
// tenant, naming it as its workspace or its workspace_from is rejected
// and the head stays as it was.
func TestJobOnAnOwnersHead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{ID: "w1"})
	owned := jobs.WorkspaceHead{Name: "team-a.mine", Revision: 1, Kept: []int64{1}, Owner: "alice"}
	v, _ := json.Marshal(owned)
	heads := b.workspaces(t).Heads
	rev, err := heads.Put(t.Context(), "team-a.mine", v)
	if err != nil {
		t.Fatal(err)
	}
	for i, field := range []string{`"workspace":"team-a.mine"`, `"workspace_from":{"name":"team-a.mine"},"workspace":"team-a.fork"`} {
		id := "team-a.owned" + string(rune('0'+i))
		res := b.publishRaw(t, id, `{"image":"python","code":"write f 1",`+field+`}`)
		if res.Status != jobs.StatusRejected || !strings.Contains(res.Error, "another owner's") {
			t.Errorf("a job with %s: %s %q, want rejected as another owner's", field, res.Status, res.Error)
		}
	}
	e, err := heads.Get(t.Context(), "team-a.mine")
	if err != nil {
		t.Fatal(err)
	}
	if e.Revision() != rev {
		t.Fatalf("the owner's head after the jobs: %s; want it untouched", e.Value())
	}
}
