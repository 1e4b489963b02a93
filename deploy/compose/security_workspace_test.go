package compose

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// expectViolationPrefix is expectViolation for a subject known only by
// its start (an object's chunks are named by a fresh NUID).
func (c *conn) expectViolationPrefix(t *testing.T, prefix string) {
	t.Helper()
	want := fmt.Sprintf("Publish to %q", prefix)
	want = want[:len(want)-1] // open quote: a prefix
	c.awaitViolation(t, "publish to "+prefix+"...", func(v string) bool { return strings.Contains(v, want) })
}

// TestWorkspaceRoles proves the workspace rules of nats.conf: a worker
// moves heads and writes snapshots and artifacts; a submitter reads them
// all and removes a workspace's head, but cannot write a snapshot or an
// artifact, nor delete a snapshot (it expires with the TTL instead).
func TestWorkspaceRoles(t *testing.T) {
	ctx := t.Context()
	topo := fleet.Topology{AckWait: 5 * time.Second}
	wrk, sub := roles(t, ctx, topo)
	workertest.Start(t, wrk.js, &fakeexec.Executor{}, worker.Config{ID: "w-ws", Slots: 1, Topology: topo})
	client, err := jobs.NewClient(ctx, sub.js, jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i, code := range []string{"write notes.txt one\nwrite plot.png PNG", "append notes.txt two"} {
		res, err := client.SubmitAndWait(ctx, &jobs.Job{ID: fmt.Sprintf("ws-%d", i), Image: "python", Code: code, Workspace: "agent", Outputs: []string{"*.png"}})
		if err != nil || res.Status != jobs.StatusSucceeded || res.Workspace == nil || res.Workspace.Revision != int64(i+1) || len(res.Artifacts) != 1 {
			t.Fatalf("step %d: %v %+v", i, err, res)
		}
		if i == 0 {
			if err := client.DownloadArtifacts(ctx, res.Artifacts, t.TempDir()); err != nil {
				t.Fatalf("submitter: download artifacts: %v", err)
			}
		}
	}
	wrk.noViolation(t)

	if list, err := client.Workspaces(ctx); err != nil || len(list) != 1 {
		t.Fatalf("submitter: ls: %v %v", list, err)
	}
	dir := filepath.Join(t.TempDir(), "agent")
	if _, _, err := client.ExtractWorkspace(ctx, jobs.WorkspaceRef{Name: "agent"}, dir); err != nil {
		t.Fatalf("submitter: get: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "notes.txt")); string(b) != "one\ntwo\n" {
		t.Fatalf("got %q", b)
	}
	sub.noViolation(t)

	stores, err := fleet.OpenWorkspaces(ctx, sub.js)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("submitter cannot write a snapshot", func(t *testing.T) {
		if _, err := stores.Snapshots.PutBytes(ctx, fleet.SnapshotName("agent", 3), []byte("forged")); err == nil {
			t.Fatal("submitter wrote a snapshot")
		}
		sub.expectViolationPrefix(t, "$O.SNAPSHOTS.")
	})
	t.Run("submitter cannot write an artifact", func(t *testing.T) {
		if _, err := stores.Artifacts.PutBytes(ctx, fleet.ArtifactKey("ws-0", "forged", "plot.png"), []byte("forged")); err == nil {
			t.Fatal("submitter wrote an artifact")
		}
		sub.expectViolationPrefix(t, "$O.ARTIFACTS.")
	})
	t.Run("submitter removes a workspace; its snapshots expire", func(t *testing.T) {
		left, err := client.DeleteWorkspace(ctx, "agent")
		if err != nil || left != 2 {
			t.Fatalf("rm: %d snapshots left, %v; want 2 left (the submitter may not delete them)", left, err)
		}
		if _, err := client.Workspace(ctx, "agent"); err == nil {
			t.Fatal("the head is still there")
		}
	})
}
