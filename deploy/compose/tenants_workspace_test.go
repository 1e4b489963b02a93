package compose

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// objMeta is the subject of an object's meta in bucket: its name in
// base64, as the object store writes it.
func objMeta(bucket, name string) string {
	return "$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
}

// TestTenantWorkspaces proves, on a server started from the nats.conf
// tenants.sh writes, that a tenant's workspaces, snapshots and artifacts
// are its own: tenant a runs steps in its workspace and reads, lists,
// watches and removes it, reads and deletes its artifacts; tenant b
// cannot read, watch, list or remove a's workspace, nor read, list or
// delete a's snapshots or artifacts (each refusal the server's, a
// violation naming the subject), and a job of b's naming a's workspace
// is rejected by the worker, running nothing. The operator's submitter
// reads them all.
func TestTenantWorkspaces(t *testing.T) {
	s := startTenantServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wrk := connect(t, s, "worker", testWorkerPassword)
	topo := fleet.Topology{AckWait: 5 * time.Second}
	exec := &fakeexec.Executor{}
	w := workertest.Start(t, wrk.js, exec, worker.Config{ID: "shared", Slots: 2, Topology: topo, FetchWait: 200 * time.Millisecond})
	testutil.Eventually(t, 30*time.Second, "the worker's topology", w.Ready)
	a, clientA := tenantConn(t, s, "team-a")
	b, clientB := tenantConn(t, s, "team-b")

	// a's session: two steps in its workspace "agent", a plot returned.
	var plot jobs.Artifact
	for i, code := range []string{"write notes.txt secret of a\nwrite plot.png PNG", "append notes.txt two"} {
		res, err := clientA.SubmitAndWait(ctx, &jobs.Job{ID: "step-" + string(rune('1'+i)), Image: "python", Code: code, Workspace: "agent", Outputs: []string{"*.png"}})
		if err != nil || res.Status != jobs.StatusSucceeded || res.Workspace == nil || res.Workspace.Name != "team-a.agent" || res.Workspace.Revision != int64(i+1) {
			t.Fatalf("a's step %d: %v %+v", i+1, err, res)
		}
		if i == 0 {
			if len(res.Artifacts) != 1 {
				t.Fatalf("a's artifacts: %+v", res.Artifacts)
			}
			plot = res.Artifacts[0]
		}
	}
	wrk.noViolation(t)

	t.Run("a reads, lists and watches its workspace", func(t *testing.T) {
		testutil.Eventually(t, 10*time.Second, "a's step released", func() bool {
			h, err := clientA.Workspace(ctx, "agent")
			return err == nil && h.Step == nil
		})
		h, err := clientA.Workspace(ctx, "team-a.agent")
		if err != nil || h.Revision != 2 || h.Job != "team-a.step-2" {
			t.Fatalf("show: %+v %v", h, err)
		}
		list, err := clientA.Workspaces(ctx)
		if err != nil || len(list) != 1 || list[0].Name != "team-a.agent" {
			t.Fatalf("ls: %+v %v", list, err)
		}
		dir := filepath.Join(t.TempDir(), "agent")
		if rev, _, err := clientA.ExtractWorkspace(ctx, jobs.WorkspaceRef{Name: "agent", Revision: 1}, dir); err != nil || rev != 1 {
			t.Fatalf("get agent@1: %d %v", rev, err)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, "notes.txt")); string(got) != "secret of a\n" {
			t.Fatalf("agent@1 notes.txt %q", got)
		}
		oc, err := a.js.OrderedConsumer(ctx, "KV_"+fleet.WorkspacesBucket, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{"$KV." + fleet.WorkspacesBucket + ".team-a.agent"}, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy})
		if err != nil {
			t.Fatal(err)
		}
		if m, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil || !strings.Contains(string(m.Data()), `"revision":2`) {
			t.Fatalf("watch: %v", err)
		}
		out := t.TempDir()
		if err := clientA.DownloadArtifacts(ctx, []jobs.Artifact{plot}, out); err != nil {
			t.Fatalf("artifacts: %v", err)
		}
		if got, _ := os.ReadFile(filepath.Join(out, "plot.png")); string(got) != "PNG\n" {
			t.Fatalf("plot.png %q", got)
		}
		a.noViolation(t)
	})

	t.Run("the operator's submitter reads them", func(t *testing.T) {
		op := connect(t, s, "submitter", testSubmitterPassword)
		client, err := jobs.NewClient(ctx, op.js, jobs.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := client.ExtractWorkspace(ctx, jobs.WorkspaceRef{Name: "team-a.agent"}, t.TempDir()); err != nil {
			t.Fatalf("get team-a.agent: %v", err)
		}
		if err := client.DownloadArtifacts(ctx, []jobs.Artifact{plot}, t.TempDir()); err != nil {
			t.Fatalf("a's artifacts: %v", err)
		}
		op.noViolation(t)
	})

	// A refused request gets no answer: the violation is the proof, and
	// it comes at once, so the wait for an answer can be short.
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 700*time.Millisecond) }
	request := func(c *conn, subject string, body []byte) {
		t.Helper()
		cctx, done := short()
		defer done()
		if m, err := c.nc.RequestWithContext(cctx, subject, body); err == nil {
			t.Errorf("%s answered: %q", subject, m.Data)
		}
		c.expectViolation(t, subject)
	}

	t.Run("b cannot read, list or watch a's workspace", func(t *testing.T) {
		if _, err := clientB.Workspace(ctx, "team-a.agent"); !errors.Is(err, jobs.ErrInvalidJob) {
			t.Errorf("b's client reading a's workspace: %v, want refused", err)
		}
		request(b, "$JS.API.DIRECT.GET.KV_WORKSPACES.$KV.WORKSPACES.team-a.agent", nil)
		request(b, "$JS.API.DIRECT.GET.KV_WORKSPACES", []byte(`{"last_by_subj":"$KV.WORKSPACES.team-a.agent"}`))
		request(b, "$JS.API.STREAM.MSG.GET.KV_WORKSPACES", []byte(`{"last_by_subj":"$KV.WORKSPACES.team-a.agent"}`))
		request(b, "$JS.API.STREAM.INFO.KV_WORKSPACES", []byte(`{"subjects_filter":"$KV.WORKSPACES.>"}`))
		for _, filter := range []string{"$KV.WORKSPACES.team-a.agent", "$KV.WORKSPACES.team-a.*", "$KV.WORKSPACES.*.*", "$KV.WORKSPACES.>"} {
			cctx, done := short()
			_, err := b.js.CreateConsumer(cctx, "KV_WORKSPACES", jetstream.ConsumerConfig{Name: "peek", FilterSubject: filter})
			done()
			if err == nil {
				t.Errorf("b made a consumer on %s", filter)
			}
			b.expectViolation(t, "$JS.API.CONSUMER.CREATE.KV_WORKSPACES.peek."+filter)
		}
		// A subject naming b's keys and a body naming a's: the server
		// refuses the mismatch.
		cctx, done := short()
		defer done()
		m, err := b.nc.RequestWithContext(cctx, "$JS.API.CONSUMER.CREATE.KV_WORKSPACES.peek.$KV.WORKSPACES.team-b.*",
			[]byte(`{"stream_name":"KV_WORKSPACES","config":{"name":"peek","filter_subjects":["$KV.WORKSPACES.team-a.*"],"ack_policy":"none"}}`))
		if err != nil || !strings.Contains(string(m.Data), `"error"`) {
			t.Errorf("a consumer filtered to b's keys by its subject and to a's by its body: %v %s", err, m.Data)
		}
		list, err := clientB.Workspaces(ctx)
		if err != nil || len(list) != 0 {
			t.Errorf("b's ls: %+v %v; want none of a's", list, err)
		}
		b.noViolation(t)
	})

	t.Run("b cannot remove a's workspace", func(t *testing.T) {
		if _, err := clientB.DeleteWorkspace(ctx, "team-a.agent"); !errors.Is(err, jobs.ErrInvalidJob) {
			t.Errorf("b's client removing a's workspace: %v, want refused", err)
		}
		cctx, done := short()
		defer done()
		if _, err := b.js.Publish(cctx, "$KV.WORKSPACES.team-a.agent", nil); err == nil {
			t.Error("b wrote a's head")
		}
		b.expectViolation(t, "$KV.WORKSPACES.team-a.agent")
		if h, err := clientA.Workspace(ctx, "agent"); err != nil || h.Revision != 2 {
			t.Fatalf("a's head after b's tries: %+v %v", h, err)
		}
	})

	t.Run("b cannot read, list or delete a's snapshots and artifacts", func(t *testing.T) {
		if err := clientB.DownloadArtifacts(ctx, []jobs.Artifact{plot}, t.TempDir()); !errors.Is(err, jobs.ErrInvalidJob) {
			t.Errorf("b's client reading a's artifact: %v, want refused", err)
		}
		headA, err := clientA.Workspace(ctx, "agent")
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ bucket, object string }{
			{fleet.SnapshotsBucketOf("team-a"), headA.Snapshot(1)},
			{fleet.ArtifactsBucketOf("team-a"), plot.Key},
		} {
			stream := "OBJ_" + tc.bucket
			cctx, done := short()
			if _, err := b.js.ObjectStore(cctx, tc.bucket); err == nil {
				t.Errorf("b bound %s", tc.bucket)
			}
			done()
			b.expectViolation(t, "$JS.API.STREAM.INFO."+stream)
			request(b, "$JS.API.DIRECT.GET."+stream+"."+objMeta(tc.bucket, tc.object), nil)
			request(b, "$JS.API.DIRECT.GET."+stream, []byte(`{"last_by_subj":"`+objMeta(tc.bucket, tc.object)+`"}`))
			request(b, "$JS.API.STREAM.MSG.GET."+stream, []byte(`{"last_by_subj":"`+objMeta(tc.bucket, tc.object)+`"}`))
			request(b, "$JS.API.CONSUMER.CREATE."+stream+".peek.$O."+tc.bucket+".M.>", []byte(`{}`)) // list
			request(b, "$JS.API.CONSUMER.CREATE."+stream+".peek.$O."+tc.bucket+".C.>", []byte(`{}`)) // read chunks
			request(b, "$JS.API.STREAM.PURGE."+stream, []byte(`{}`))
			cctx, done = short()
			if _, err := b.js.Publish(cctx, objMeta(tc.bucket, tc.object), []byte(`{"deleted":true}`)); err == nil {
				t.Errorf("b marked a's %s deleted", tc.object)
			}
			done()
			b.expectViolation(t, objMeta(tc.bucket, tc.object))
		}
		// And what b may do in its own buckets reaches none of a's.
		cctx, done := short()
		defer done()
		if _, err := b.js.ObjectStore(cctx, fleet.ArtifactsBucketOf("team-b")); !errors.Is(err, jetstream.ErrBucketNotFound) {
			t.Errorf("b's own artifacts store before its first job: %v, want not found", err)
		}
		b.noViolation(t)
	})

	t.Run("a job of b's cannot name a's workspace", func(t *testing.T) {
		for _, tc := range []struct{ id, body, field string }{
			{"team-b.steal", `{"image":"python","code":"cat notes.txt","workspace":"team-a.agent"}`, "workspace"},
			{"team-b.fork", `{"image":"python","code":"cat notes.txt","workspace":"team-b.mine","workspace_from":{"name":"team-a.agent"}}`, "workspace_from.name"},
			{"team-b.copy", `{"image":"python","code":"cat notes.txt","workspace_from":{"name":"team-a.agent","revision":1}}`, "workspace_from.name"},
		} {
			// A bare publish: the worker's check, not the client's.
			if _, err := b.js.Publish(ctx, fleet.Subject("default", tc.id), []byte(tc.body)); err != nil {
				t.Fatal(err)
			}
			res, err := clientB.Wait(ctx, tc.id)
			if err != nil || res.Status != jobs.StatusRejected || !strings.Contains(res.Error, tc.field+": ") || strings.Contains(res.Stdout, "secret") {
				t.Errorf("%s: %v %+v, want rejected naming %s", tc.id, err, res, tc.field)
			}
			if exec.Runs(tc.id) != 0 {
				t.Errorf("%s ran", tc.id)
			}
		}
		if _, err := clientB.Submit(ctx, &jobs.Job{Image: "python", Code: "cat notes.txt", Workspace: "team-a.agent"}); !errors.Is(err, jobs.ErrInvalidJob) {
			t.Errorf("b's client sent a job naming a's workspace: %v", err)
		}
		if h, err := clientA.Workspace(ctx, "agent"); err != nil || h.Revision != 2 || h.Step != nil {
			t.Fatalf("a's head after b's jobs: %+v %v", h, err)
		}
		b.noViolation(t)
	})

	t.Run("b has its own", func(t *testing.T) {
		res, err := clientB.SubmitAndWait(ctx, &jobs.Job{ID: "own", Image: "python", Code: "append notes.txt b\ncat notes.txt\nwrite b.png B", Workspace: "agent", Outputs: []string{"*.png"}})
		if err != nil || res.Status != jobs.StatusSucceeded || res.Workspace.Name != "team-b.agent" || res.Stdout != "b\n" || len(res.Artifacts) != 1 {
			t.Fatalf("b's step: %v %+v", err, res)
		}
		if err := clientB.DownloadArtifacts(ctx, res.Artifacts, t.TempDir()); err != nil {
			t.Fatalf("b's artifacts: %v", err)
		}
		list, err := clientB.Workspaces(ctx)
		if err != nil || len(list) != 1 || list[0].Name != "team-b.agent" {
			t.Fatalf("b's ls: %+v %v", list, err)
		}
		b.noViolation(t)
	})

	t.Run("a deletes its artifact and removes its workspace", func(t *testing.T) {
		arts, err := a.js.ObjectStore(ctx, fleet.ArtifactsBucketOf("team-a"))
		if err != nil {
			t.Fatal(err)
		}
		if err := arts.Delete(ctx, plot.Key); err != nil {
			t.Fatalf("a deletes its artifact: %v", err)
		}
		if err := clientA.DownloadArtifacts(ctx, []jobs.Artifact{plot}, t.TempDir()); !errors.Is(err, jetstream.ErrObjectNotFound) {
			t.Errorf("a's deleted artifact: %v", err)
		}
		headA, err := clientA.Workspace(ctx, "agent")
		if err != nil {
			t.Fatal(err)
		}
		left, err := clientA.DeleteWorkspace(ctx, "agent")
		if err != nil || left != 0 {
			t.Fatalf("a's rm: %d left, %v", left, err)
		}
		if _, err := clientA.Workspace(ctx, "agent"); !errors.Is(err, jobs.ErrNoWorkspace) {
			t.Errorf("a's head after rm: %v", err)
		}
		snaps, err := a.js.ObjectStore(ctx, fleet.SnapshotsBucketOf("team-a"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := snaps.GetInfo(ctx, headA.Snapshot(2)); !errors.Is(err, jetstream.ErrObjectNotFound) {
			t.Errorf("a's snapshot after rm: %v", err)
		}
		if h, err := clientB.Workspace(ctx, "agent"); err != nil || h.Revision != 1 {
			t.Errorf("b's workspace of the same name after a's rm: %+v %v", h, err)
		}
		a.noViolation(t)
	})
	wrk.noViolation(t)
}
