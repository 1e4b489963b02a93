package worker_test

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// step runs one job on a workspace and waits for its result.
func (b *bundle) step(t *testing.T, j *jobs.Job) *jobs.Result {
	t.Helper()
	if j.Image == "" {
		j.Image = "python"
	}
	res, err := b.client.SubmitAndWait(waitCtx(t), j)
	if err != nil {
		t.Fatalf("job %s: %v", j.ID, err)
	}
	return res
}

func (b *bundle) workspaces(t *testing.T) *fleet.WorkspaceStores {
	t.Helper()
	ws, err := b.topo.EnsureWorkspaces(t.Context(), b.js)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

func (b *bundle) head(t *testing.T, name string) *jobs.WorkspaceHead {
	t.Helper()
	h, err := b.client.Workspace(t.Context(), name)
	if err != nil {
		t.Fatalf("workspace %s: %v", name, err)
	}
	return h
}

// released waits for the head of name to have no step in flight: a step
// releases its workspace just after its result is stored.
func (b *bundle) released(t *testing.T, name string) *jobs.WorkspaceHead {
	t.Helper()
	var h *jobs.WorkspaceHead
	testutil.Eventually(t, 10*time.Second, "workspace "+name+" released", func() bool {
		h = b.head(t, name)
		return h.Step == nil
	})
	return h
}

func wantStep(t *testing.T, res *jobs.Result, from, rev int64) {
	t.Helper()
	if res.Status != jobs.StatusSucceeded || res.Workspace == nil || res.Workspace.From.Revision != from || res.Workspace.Revision != rev {
		t.Fatalf("job %s: status %s, workspace %+v (error %q); want %d → %d", res.ID, res.Status, res.Workspace, res.Error, from, rev)
	}
}

// Steps on a workspace build on each other: each starts from the last
// revision and produces the next, and the head says which job wrote it.
func TestWorkspaceSteps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{ID: "w1"})
	for i := 1; i <= 3; i++ {
		res := b.step(t, &jobs.Job{ID: fmt.Sprintf("s%d", i), Workspace: "agent-7", Code: fmt.Sprintf("append notes.txt line %d\ncat notes.txt", i)})
		wantStep(t, res, int64(i-1), int64(i))
		if !strings.HasSuffix(res.Stdout, fmt.Sprintf("line %d\n", i)) || strings.Count(res.Stdout, "\n") != i {
			t.Fatalf("step %d: stdout %q", i, res.Stdout)
		}
	}
	h := b.released(t, "agent-7")
	if h.Revision != 3 || h.Job != "s3" || h.Step != nil || !slices.Equal(h.Kept, []int64{1, 2, 3}) {
		t.Fatalf("head %+v", h)
	}
}

// The concurrency rule: one step at a time per workspace. Ten jobs racing
// on one workspace, on three workers of two slots each, all run, one after
// another: each appends its line once, the revisions 1 to 10 are each
// produced by exactly one job, and each job started from the one before.
func TestWorkspaceTenRacing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 3 {
		b.startWorker(t, worker.Config{ID: fmt.Sprintf("w%d", i), Slots: 2})
	}
	results := make([]*jobs.Result, 10)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			results[i] = b.step(t, &jobs.Job{ID: fmt.Sprintf("race-%d", i), Workspace: "race", Code: fmt.Sprintf("append log.txt race-%d", i)})
		})
	}
	wg.Wait()
	byRev := map[int64]string{}
	for _, r := range results {
		if r.Status != jobs.StatusSucceeded || r.Workspace == nil || r.Workspace.Revision != r.Workspace.From.Revision+1 {
			t.Fatalf("%s: %s %+v %q", r.ID, r.Status, r.Workspace, r.Error)
		}
		if other, dup := byRev[r.Workspace.Revision]; dup {
			t.Fatalf("revision %d produced by %s and %s", r.Workspace.Revision, other, r.ID)
		}
		byRev[r.Workspace.Revision] = r.ID
	}
	for rev := int64(1); rev <= 10; rev++ {
		if byRev[rev] == "" {
			t.Fatalf("no job produced revision %d: %v", rev, byRev)
		}
	}
	final := b.step(t, &jobs.Job{ID: "race-read", Workspace: "race", Code: "cat log.txt"})
	lines := strings.Split(strings.TrimSpace(final.Stdout), "\n")
	// The file is the history: line k is the job that produced revision k.
	for k, l := range lines {
		if l != byRev[int64(k+1)] {
			t.Fatalf("line %d is %q, want %q (the job of revision %d); file %q", k+1, l, byRev[int64(k+1)], k+1, final.Stdout)
		}
	}
	if len(lines) != 10 {
		t.Fatalf("%d lines, want 10: %q", len(lines), final.Stdout)
	}
}

// snapshotOf is the tar of a workspace holding files.
func snapshotOf(files map[string]string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(files[name]))})
		_, _ = tw.Write([]byte(files[name]))
	}
	_ = tw.Close()
	return buf.Bytes()
}

// leave writes the state a worker that died mid-step leaves behind: the
// head (and its snapshots) as they were when it died.
func (b *bundle) leave(t *testing.T, h *jobs.WorkspaceHead, snaps map[int64]map[string]string) {
	t.Helper()
	ws := b.workspaces(t)
	for rev, files := range snaps {
		if _, err := ws.Snapshots.PutBytes(t.Context(), fleet.SnapshotName(h.Name, rev), snapshotOf(files)); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := json.Marshal(h)
	if _, err := ws.Heads.Put(t.Context(), h.Name, data); err != nil {
		t.Fatal(err)
	}
}

// Exactly once, for each place a worker can die in a step: the
// redelivered job runs against the state its first attempt ran against,
// and the workspace moves once.
func TestWorkspaceRedeliveryAfterDeath(t *testing.T) {
	t.Parallel()
	one := map[string]string{"log.txt": "line 1\n"}
	two := map[string]string{"log.txt": "line 1\nline 2\n"}
	for _, tc := range []struct {
		name     string
		head     *jobs.WorkspaceHead
		snaps    map[int64]map[string]string
		rev      int64 // the revision the job reports
		replayed bool
	}{
		{
			// Died before saving: running(J) is taken over; J starts
			// again from the same base and saves revision 2.
			name:  "before the save",
			head:  &jobs.WorkspaceHead{Name: "ws", Revision: 1, Kept: []int64{1}, Step: &jobs.InFlight{Job: "j2", State: jobs.StepRunning, Base: jobs.WorkspaceRef{Name: "ws", Revision: 1}, Worker: "dead"}},
			snaps: map[int64]map[string]string{1: one},
			rev:   2,
		},
		{
			// Died after saving, before the result: saved(J) is replayed
			// against revision 1, and revision 2 stands; no revision 3.
			name:     "after the save",
			head:     &jobs.WorkspaceHead{Name: "ws", Revision: 2, Kept: []int64{1, 2}, Job: "j2", Step: &jobs.InFlight{Job: "j2", State: jobs.StepSaved, Base: jobs.WorkspaceRef{Name: "ws", Revision: 1}, Worker: "dead"}},
			snaps:    map[int64]map[string]string{1: one, 2: two},
			rev:      2,
			replayed: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.leave(t, tc.head, tc.snaps)
			b.startWorker(t, worker.Config{ID: "w2"})
			res := b.step(t, &jobs.Job{ID: "j2", Workspace: "ws", Code: "append log.txt line 2\ncat log.txt"})
			wantStep(t, res, 1, tc.rev)
			if res.Workspace.Replayed != tc.replayed || res.Stdout != "line 1\nline 2\n" {
				t.Fatalf("replayed %v, stdout %q; want %v and the base plus one line", res.Workspace.Replayed, res.Stdout, tc.replayed)
			}
			h := b.released(t, "ws")
			if h.Revision != 2 || h.Job != "j2" {
				t.Fatalf("head %+v; want revision 2 by j2, released", h)
			}
			next := b.step(t, &jobs.Job{ID: "j3", Workspace: "ws", Code: "append log.txt line 3\ncat log.txt"})
			wantStep(t, next, 2, 3)
			if next.Stdout != "line 1\nline 2\nline 3\n" {
				t.Fatalf("after: %q, want 3 lines", next.Stdout)
			}
		})
	}
}

// A holder whose result is stored but that never released (its worker
// died between the two) does not block the workspace; and its own
// redelivery releases it.
func TestWorkspaceHolderGone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.leave(t, &jobs.WorkspaceHead{Name: "ws", Revision: 1, Kept: []int64{1}, Job: "k", Step: &jobs.InFlight{Job: "k", State: jobs.StepSaved, Base: jobs.WorkspaceRef{Name: "ws"}}},
		map[int64]map[string]string{1: {"log.txt": "k\n"}})
	now := time.Now().UTC()
	if _, _, err := records.StoreResult(t.Context(), natstest.Stores(t, b.js).Results, &jobs.Result{ID: "k", Status: jobs.StatusSucceeded, FinishedAt: &now}, 0); err != nil {
		t.Fatal(err)
	}
	b.startWorker(t, worker.Config{ID: "w1"})
	res := b.step(t, &jobs.Job{ID: "j", Workspace: "ws", Code: "append log.txt j\ncat log.txt"})
	wantStep(t, res, 1, 2)
	if res.Stdout != "k\nj\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}

	// k delivered again: its result is there; it releases nothing of j's
	// and runs nothing.
	again := b.step(t, &jobs.Job{ID: "k", Workspace: "ws", Code: "append log.txt k-again"})
	if again.Status != jobs.StatusSucceeded || b.exec.Runs("k") != 0 {
		t.Fatalf("k ran again: %+v, runs %d", again, b.exec.Runs("k"))
	}
	if h := b.released(t, "ws"); h.Revision != 2 {
		t.Fatalf("head %+v", h)
	}
}

// A fork starts a new workspace from another's revision; workspace_from
// alone runs on a copy that is not kept; a fork into a workspace that has
// a revision is rejected.
func TestWorkspaceFork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{ID: "w1"})
	wantStep(t, b.step(t, &jobs.Job{ID: "b1", Workspace: "base", Code: "write data.txt v1"}), 0, 1)
	wantStep(t, b.step(t, &jobs.Job{ID: "b2", Workspace: "base", Code: "write data.txt v2"}), 1, 2)

	res := b.step(t, &jobs.Job{ID: "f1", Workspace: "eval-1", WorkspaceFrom: &jobs.WorkspaceRef{Name: "base", Revision: 1}, Code: "append data.txt eval\ncat data.txt"})
	if res.Status != jobs.StatusSucceeded || res.Stdout != "v1\neval\n" || res.Workspace.From != (jobs.WorkspaceRef{Name: "base", Revision: 1}) || res.Workspace.Revision != 1 {
		t.Fatalf("fork: %s %q %+v %q", res.Status, res.Stdout, res.Workspace, res.Error)
	}
	if h := b.head(t, "eval-1"); h.Revision != 1 || h.Forked == nil || *h.Forked != (jobs.WorkspaceRef{Name: "base", Revision: 1}) {
		t.Fatalf("fork head %+v", h)
	}
	wantStep(t, b.step(t, &jobs.Job{ID: "f2", Workspace: "eval-1", Code: "cat data.txt"}), 1, 2)

	cp := b.step(t, &jobs.Job{ID: "c1", WorkspaceFrom: &jobs.WorkspaceRef{Name: "base"}, Code: "append data.txt scratch\ncat data.txt"})
	if cp.Status != jobs.StatusSucceeded || cp.Stdout != "v2\nscratch\n" || cp.Workspace == nil || cp.Workspace.Name != "" || cp.Workspace.From.Revision != 2 {
		t.Fatalf("copy: %s %q %+v", cp.Status, cp.Stdout, cp.Workspace)
	}
	if h := b.head(t, "base"); h.Revision != 2 {
		t.Fatalf("the copy changed base: %+v", h)
	}

	for id, j := range map[string]*jobs.Job{
		"onto-existing": {Workspace: "eval-1", WorkspaceFrom: &jobs.WorkspaceRef{Name: "base"}, Code: "cat data.txt"},
		"no-source":     {Workspace: "eval-2", WorkspaceFrom: &jobs.WorkspaceRef{Name: "nothing"}, Code: "cat data.txt"},
		"gone-revision": {Workspace: "eval-3", WorkspaceFrom: &jobs.WorkspaceRef{Name: "base", Revision: 7}, Code: "cat data.txt"},
	} {
		j.ID = id
		if res := b.step(t, j); res.Status != jobs.StatusRejected || !strings.Contains(res.Error, "workspace_from") {
			t.Errorf("%s: %s %q, want rejected naming workspace_from", id, res.Status, res.Error)
		}
	}
}

// Bad workspace names and globs are rejected, naming the field.
func TestWorkspaceRejected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{ID: "w1"})
	for _, tc := range []struct {
		job   string
		field string
	}{
		{`{"image":"python","code":"x","workspace":"a/b"}`, "workspace"},
		{`{"image":"python","code":"x","workspace":"a.b"}`, "workspace"},
		{`{"image":"python","code":"x","workspace":""}`, ""},
		{`{"image":"python","code":"x","workspace_from":{"name":"../x"}}`, "workspace_from.name"},
		{`{"image":"python","code":"x","workspace":"w","workspace_from":{"name":"w"}}`, "workspace_from"},
		{`{"image":"python","code":"x","workspace_from":{"name":"w","revision":-1}}`, "workspace_from.revision"},
		{`{"image":"python","code":"x","outputs":["/etc/*"]}`, "outputs[0]"},
		{`{"image":"python","code":"x","outputs":["ok","../*"]}`, "outputs[1]"},
		{`{"image":"python","code":"x","outputs":["[a"]}`, "outputs[0]"},
	} {
		id := jobs.NewID()
		watch, err := b.client.Watch(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.js.Publish(t.Context(), fleet.Subject("default", id), []byte(tc.job)); err != nil {
			t.Fatal(err)
		}
		res, err := watch.Next(waitCtx(t))
		watch.Stop()
		if err != nil {
			t.Fatal(err)
		}
		if tc.field == "" {
			if res.Status != jobs.StatusSucceeded {
				t.Errorf("%s: %s %q", tc.job, res.Status, res.Error)
			}
			continue
		}
		if res.Status != jobs.StatusRejected || !strings.Contains(res.Error, tc.field+":") {
			t.Errorf("%s: %s %q, want rejected naming %s", tc.job, res.Status, res.Error, tc.field)
		}
	}
	// The client refuses them before publishing.
	if _, err := b.client.Submit(t.Context(), &jobs.Job{Image: "python", Code: "x", Outputs: []string{"../*"}}); !errors.Is(err, jobs.ErrInvalidJob) {
		t.Errorf("Submit with a bad glob: %v", err)
	}
}

// Outputs come back as artifacts within the caps; what does not fit is
// listed with the reason; the client downloads them.
func TestArtifacts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{ID: "w1", MaxArtifacts: 2})
	res := b.step(t, &jobs.Job{ID: "art", Outputs: []string{"*.png", "results/**"},
		Code: "write a.png A\nwrite b.png B\nwrite results/x/c.csv C\nwrite notes.txt N"})
	if res.Status != jobs.StatusSucceeded || len(res.Artifacts) != 2 || len(res.ArtifactsSkipped) != 1 || res.Workspace != nil {
		t.Fatalf("result %+v", res)
	}
	if a := res.Artifacts[0]; a.Name != "a.png" || a.Size != 2 || !strings.HasPrefix(a.Key, "art/") || !strings.HasSuffix(a.Key, "/a.png") || len(a.SHA256) != 64 {
		t.Fatalf("artifact %+v", a)
	}
	if s := res.ArtifactsSkipped[0]; s.Name != "results/x/c.csv" || !strings.Contains(s.Reason, "limit of 2 artifacts") {
		t.Fatalf("skipped %+v", s)
	}
	dir := t.TempDir()
	if err := b.client.DownloadArtifacts(t.Context(), res.Artifacts, dir); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a.png": "A\n", "b.png": "B\n"} {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != want {
			t.Fatalf("%s: %q %v", name, got, err)
		}
	}
	// A tampered listing is refused: wrong digest, or a name leading out.
	bad := res.Artifacts[0]
	bad.SHA256 = strings.Repeat("0", 64)
	if err := b.client.DownloadArtifacts(t.Context(), []jobs.Artifact{bad}, t.TempDir()); !errors.Is(err, jobs.ErrDigest) {
		t.Fatalf("bad digest: %v", err)
	}
	bad = res.Artifacts[0]
	bad.Name = "../escape.png"
	if err := b.client.DownloadArtifacts(t.Context(), []jobs.Artifact{bad}, t.TempDir()); err == nil {
		t.Fatal("a name leading out was written")
	}
}

// rm removes the head and the snapshots; the next step starts afresh; get
// writes a snapshot's files.
func TestWorkspaceRemoveAndGet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{ID: "w1"})
	wantStep(t, b.step(t, &jobs.Job{ID: "g1", Workspace: "g", Code: "write sub/data.txt hello"}), 0, 1)
	dir := filepath.Join(t.TempDir(), "out")
	rev, n, err := b.client.ExtractWorkspace(t.Context(), jobs.WorkspaceRef{Name: "g"}, dir)
	if err != nil || rev != 1 || n != 1 { // the fake archives files only, no directories
		t.Fatalf("extract: rev %d, %d files, %v", rev, n, err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "sub/data.txt")); string(got) != "hello\n" {
		t.Fatalf("extracted %q", got)
	}
	if list, err := b.client.Workspaces(t.Context()); err != nil || len(list) != 1 || list[0].Name != "g" {
		t.Fatalf("ls: %v %v", list, err)
	}
	snap := b.head(t, "g").Snapshot(1)
	if _, err := b.workspaces(t).Snapshots.GetInfo(t.Context(), snap); err != nil {
		t.Fatalf("snapshot %s before rm: %v", snap, err)
	}
	if left, err := b.client.DeleteWorkspace(t.Context(), "g"); err != nil || left != 0 {
		t.Fatalf("rm: %d left, %v", left, err)
	}
	if _, err := b.client.Workspace(t.Context(), "g"); !errors.Is(err, jobs.ErrNoWorkspace) {
		t.Fatalf("after rm: %v", err)
	}
	if _, err := b.workspaces(t).Snapshots.GetInfo(t.Context(), snap); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Fatalf("snapshot after rm: %v", err)
	}
	wantStep(t, b.step(t, &jobs.Job{ID: "g2", Workspace: "g", Code: "cat sub/data.txt"}), 0, 1)
}

// A step that ends without its own verdict (timeout, cancel) saves
// nothing and releases the workspace.
func TestWorkspaceNotSaved(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{ID: "w1"})
	wantStep(t, b.step(t, &jobs.Job{ID: "n1", Workspace: "n", Code: "write f 1"}), 0, 1)
	res := b.step(t, &jobs.Job{ID: "n2", Workspace: "n", Code: "write f 2\ntimeout"})
	if res.Status != jobs.StatusTimeout || res.Workspace == nil || res.Workspace.Revision != 1 || !strings.Contains(res.Workspace.Error, "not saved") {
		t.Fatalf("timeout: %s %+v", res.Status, res.Workspace)
	}
	if h := b.released(t, "n"); h.Revision != 1 {
		t.Fatalf("head %+v", h)
	}
	wantStep(t, b.step(t, &jobs.Job{ID: "n3", Workspace: "n", Code: "cat f"}), 1, 2)
}

// A job waiting for a busy workspace can be canceled; the holder is not
// disturbed, and the workspace moves only for the holder.
func TestWorkspaceWaiterCanceled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{ID: "w1", Slots: 2})
	release := filepath.Join(t.TempDir(), "go")
	holder, err := b.client.Watch(t.Context(), "holder")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Stop()
	if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "holder", Image: "python", Workspace: "busy", Code: "append f holder\nwaitfile " + release}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "holder running", func() bool { return b.exec.Running() == 1 })
	if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "waiter", Image: "python", Workspace: "busy", Code: "append f waiter"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "waiter delivered", func() bool {
		q, err := b.client.Pending(t.Context(), "waiter")
		if err != nil || !q {
			return false
		}
		c, err := b.js.Consumer(t.Context(), fleet.StreamName, fleet.ConsumerName("default"))
		if err != nil {
			return false
		}
		info, err := c.Info(t.Context())
		return err == nil && info.NumAckPending == 2
	})
	res, err := b.client.Cancel(waitCtx(t), "waiter")
	if err != nil || res.Status != jobs.StatusCanceled || b.exec.Runs("waiter") != 0 {
		t.Fatalf("cancel of the waiter: %v %+v, runs %d", err, res, b.exec.Runs("waiter"))
	}
	os.WriteFile(release, nil, 0o600)
	hres, err := holder.Next(waitCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	wantStep(t, hres, 0, 1)
	if h := b.released(t, "busy"); h.Revision != 1 || h.Job != "holder" {
		t.Fatalf("head %+v", h)
	}
}

// A workspace without a step for its TTL is gone, its snapshots with it;
// the next step starts afresh.
func TestWorkspaceExpires(t *testing.T) {
	t.Parallel()
	b := setupWith(t, fleet.Topology{AckWait: 2 * time.Second, MaxJobBytes: 64 << 10, WorkspaceTTL: time.Second})
	b.startWorker(t, worker.Config{ID: "w1"})
	wantStep(t, b.step(t, &jobs.Job{ID: "e1", Workspace: "short", Code: "write f 1"}), 0, 1)
	snap := b.head(t, "short").Snapshot(1)
	if _, err := b.workspaces(t).Snapshots.GetInfo(t.Context(), snap); err != nil {
		t.Fatalf("snapshot %s: %v", snap, err)
	}
	testutil.Eventually(t, 15*time.Second, "workspace expired", func() bool {
		_, err := b.client.Workspace(t.Context(), "short")
		return errors.Is(err, jobs.ErrNoWorkspace)
	})
	testutil.Eventually(t, 15*time.Second, "snapshot expired", func() bool {
		_, err := b.workspaces(t).Snapshots.GetInfo(t.Context(), snap)
		return errors.Is(err, jetstream.ErrObjectNotFound)
	})
	res := b.step(t, &jobs.Job{ID: "e2", Workspace: "short", Code: "cat f"})
	wantStep(t, res, 0, 1)
	if res.Stdout != "" {
		t.Fatalf("an expired workspace came back: %q", res.Stdout)
	}
}

// A workspace whose steps keep coming but save nothing (each ends as a
// timeout) lives on past its snapshot's first TTL: each step puts the
// latest snapshot again once it is old, so that the next step finds it,
// not an error saying it is gone, also on a worker without it in memory;
// its revisions still say when it was first saved.
func TestWorkspaceStepsWithoutSavingKeepTheSnapshot(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	b := setupWith(t, fleet.Topology{AckWait: 2 * time.Second, MaxJobBytes: 64 << 10, WorkspaceTTL: ttl})
	b.startWorker(t, worker.Config{ID: "wa", Queues: []worker.Lane{{Queue: "a", Weight: 1}}})
	b.startWorker(t, worker.Config{ID: "wb", Queues: []worker.Lane{{Queue: "b", Weight: 1}}})
	on := func(q, id, code string) *jobs.Job {
		return &jobs.Job{ID: id, Queue: q, Workspace: "busy-agent", Code: code}
	}
	wantStep(t, b.step(t, on("a", "keep-1", "write f kept")), 0, 1)
	saved := time.Now()
	snapTTL := b.topo.SnapshotTTL()
	for i := 0; time.Since(saved) < 2*snapTTL; i++ {
		res := b.step(t, on("a", fmt.Sprintf("unsaved-%d", i), "sleep 300ms\ntimeout"))
		if res.Status != jobs.StatusTimeout || res.Workspace == nil || res.Workspace.Revision != 1 || res.Workspace.Error == "" {
			t.Fatalf("step %d: %s, workspace %+v (error %q); want a timeout that saved nothing", i, res.Status, res.Workspace, res.Error)
		}
	}
	revs, err := b.client.Revisions(t.Context(), b.released(t, "busy-agent"))
	if err != nil || len(revs) != 1 || revs[0].Revision != 1 || revs[0].Job != "keep-1" || revs[0].Saved.After(saved) {
		t.Fatalf("revisions %+v, %v; want revision 1, saved by keep-1 before %s", revs, err, saved.UTC())
	}
	res := b.step(t, on("b", "keep-last", "cat f"))
	if res.Status != jobs.StatusSucceeded || res.Stdout != "kept\n" {
		t.Fatalf("after %s of steps saving nothing (snapshots kept %s): %s %q (error %q); want the saved file",
			time.Since(saved).Round(time.Millisecond), snapTTL, res.Status, res.Stdout, res.Error)
	}
}

// The worker that saved a revision restores the next step from memory, not
// from the object store; a workspace removed and made again, whose
// revision numbers start over, never gets the old one's bytes, even when
// another worker saved the new ones.
func TestWorkspaceSnapshotCache(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{ID: "wa", Queues: []worker.Lane{{Queue: "a", Weight: 1}}})
	b.startWorker(t, worker.Config{ID: "wb", Queues: []worker.Lane{{Queue: "b", Weight: 1}}})
	on := func(q, id, code string) *jobs.Job {
		return &jobs.Job{ID: id, Queue: q, Workspace: "c", Code: code}
	}
	wantStep(t, b.step(t, on("a", "c1", "write f first")), 0, 1)
	h := b.released(t, "c")
	// Out of band, the saved snapshot's object goes: only wa's cache has it.
	if err := b.workspaces(t).Snapshots.Delete(t.Context(), h.Snapshot(1)); err != nil {
		t.Fatal(err)
	}
	res := b.step(t, on("a", "c2", "cat f"))
	wantStep(t, res, 1, 2)
	if res.Stdout != "first\n" || res.Worker != "wa" {
		t.Fatalf("restored from the cache: stdout %q on %s", res.Stdout, res.Worker)
	}
	b.released(t, "c")
	if _, err := b.client.DeleteWorkspace(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	// Made again by wb: revision 2 exists once more, with other bytes, and
	// wa's cache still holds the old revision 2.
	wantStep(t, b.step(t, on("b", "c3", "write f second")), 0, 1)
	wantStep(t, b.step(t, on("b", "c4", "write f third")), 1, 2)
	b.released(t, "c")
	res = b.step(t, on("a", "c5", "cat f"))
	wantStep(t, res, 2, 3)
	if res.Stdout != "third\n" {
		t.Fatalf("after the workspace was made again: stdout %q", res.Stdout)
	}
}

// Two live deliveries of one step: the first's lease runs out while it
// still runs (its InProgress lost behind a slow broker, as a -NAK from the
// side makes happen here), and the server hands the job to another worker,
// which takes the step over. Both run and save; the first, no longer
// holding the head, must neither commit nor delete the taker's snapshot:
// the next step, on a worker that never saw either (no cached copy),
// restores what the taker saved.
func TestWorkspaceTwoLiveDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spy, acks := b.ackSpy(t, "j")
	wa := b.startWorker(t, worker.Config{ID: "wa", Slots: 1})
	wb := b.startWorker(t, worker.Config{ID: "wb", Slots: 1})

	release := filepath.Join(t.TempDir(), "go")
	rw, err := b.client.Watch(t.Context(), "j")
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Stop()
	if _, err := b.client.Submit(waitCtx(t), &jobs.Job{ID: "j", Image: "python", Workspace: "ws",
		Code: "waitfile " + release + "\nappend log.txt from-j\ncat log.txt"}); err != nil {
		t.Fatal(err)
	}
	// The spy sees the delivery on its own subscription, which may trail
	// the run.
	testutil.Eventually(t, 10*time.Second, "first delivery running", func() bool { return b.exec.Running() == 1 && len(acks()) > 0 })
	first := acks()[0]
	if err := spy.Publish(first, []byte("-NAK")); err != nil { // what the lease's end does
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "second delivery running", func() bool { return b.exec.Running() == 2 })
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := rw.Next(waitCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != jobs.StatusSucceeded {
		t.Fatalf("j: %s %s", res.Status, res.Error)
	}
	testutil.Eventually(t, 10*time.Second, "both deliveries over", func() bool { return b.exec.Running() == 0 })
	h := b.released(t, "ws")
	if h.Revision != 1 {
		t.Fatalf("head at revision %d, want 1", h.Revision)
	}
	if _, err := b.workspaces(t).Snapshots.GetInfo(t.Context(), h.Snapshot(1)); err != nil {
		t.Fatalf("the committed snapshot %s: %v", h.Snapshot(1), err)
	}
	wa.Stop(t)
	wb.Stop(t)
	b.startWorker(t, worker.Config{ID: "wc", Slots: 1})
	next := b.step(t, &jobs.Job{ID: "k", Workspace: "ws", Code: "cat log.txt"})
	if next.Status != jobs.StatusSucceeded || next.Stdout != "from-j\n" {
		t.Fatalf("next step: %s %q %q; want succeeded with j's file", next.Status, next.Stdout, next.Error)
	}
}
