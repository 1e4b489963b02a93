package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil/archivetest"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// A session through the command line: steps on a workspace, files back
// with --outputs and -O, then ls, show, get, artifacts and rm.
func TestWorkspaceCommands(t *testing.T) {
	t.Parallel()
	url := setup(t, false)
	dir := t.TempDir()
	want := func(got out, code int, stdoutHas, stderrHas string) {
		t.Helper()
		if got.code != code || !strings.Contains(got.stdout, stdoutHas) || !strings.Contains(got.stderr, stderrHas) {
			t.Fatalf("exit %d, stdout %q, stderr %q; want %d, %q, %q", got.code, got.stdout, got.stderr, code, stdoutHas, stderrHas)
		}
	}
	want(submit(t, url, "", "run", "--workspace", "agent", "-c", "append notes.txt one"), 0, "", "")
	out := submit(t, url, "", "run", "--workspace", "agent", "--id", "s2", "-c", "append notes.txt two\nwrite plot.png PNG\ncat notes.txt",
		"--outputs", "*.png", "-O", filepath.Join(dir, "art"))
	want(out, 0, "one\ntwo\n", "1 artifacts of s2 written to")
	if b, err := os.ReadFile(filepath.Join(dir, "art", "plot.png")); err != nil || string(b) != "PNG\n" {
		t.Fatalf("artifact: %q %v", b, err)
	}
	var res jobs.Result
	js := submit(t, url, "", "get", "s2", "--json")
	if err := json.Unmarshal([]byte(js.stdout), &res); err != nil || res.Workspace == nil || res.Workspace.Revision != 2 || res.Workspace.From.Revision != 1 {
		t.Fatalf("get --json: %s %v", js.stdout, err)
	}

	want(submit(t, url, "", "workspace", "ls"), 0, "agent", "")
	want(submit(t, url, "", "workspace", "show", "agent"), 0, "revision   2 (job s2)", "")
	want(submit(t, url, "", "artifacts", "s2"), 0, "plot.png", "")
	want(submit(t, url, "", "artifacts", "s2", "-O", filepath.Join(dir, "again")), 0, "plot.png", "written to")
	got := filepath.Join(dir, "ws")
	want(submit(t, url, "", "workspace", "get", "agent@1", "-o", got), 0, "wrote agent@1", "")
	if b, err := os.ReadFile(filepath.Join(got, "notes.txt")); err != nil || string(b) != "one\n" {
		t.Fatalf("get agent@1: %q %v", b, err)
	}
	want(submit(t, url, "", "workspace", "get", "agent", "-o", got), 2, "", "not empty")
	want(submit(t, url, "", "workspace", "get", "agent@9", "-o", filepath.Join(dir, "nine")), 1, "", "revision not kept")
	want(submit(t, url, "", "workspace", "show", "nobody"), 1, "", "no such workspace")
	want(submit(t, url, "", "workspace", "rm", "agent"), 0, "removed workspace agent", "")
	want(submit(t, url, "", "workspace", "show", "agent"), 1, "", "no such workspace")

	// Usage and rejected input.
	want(submit(t, url, "", "workspace"), 2, "", "workspace takes")
	want(submit(t, url, "", "workspace", "frob"), 2, "", "unknown workspace command")
	want(submit(t, url, "", "workspace", "get", "agent"), 2, "", "needs -o DIR")
	want(submit(t, url, "", "run", "--workspace", "a/b", "-c", "x"), 2, "", "workspace:")
	want(submit(t, url, "", "run", "--outputs", "../x", "-c", "x"), 2, "", "outputs[0]")
	want(submit(t, url, "", "run", "--workspace-from", "base@x", "-c", "x"), 2, "", "revision")
	want(submit(t, url, "", "run", "-O", dir, "-c", "x"), 2, "", "give --outputs")
	want(submit(t, url, "", "artifacts", "no-such-job"), 1, "", "no job")
}

// An artifact whose bytes fail their digest leaves the file of its name in
// -O DIR as it was (it is written beside it, and renamed over it only once
// it checks), and leaves nothing else; one that checks replaces it.
func TestArtifactDownloadKeepsTheOldFile(t *testing.T) {
	t.Parallel()
	url := setup(t, false)
	if got := submit(t, url, "", "run", "--id", "art", "-c", "write plot.png PNG", "--outputs", "*.png"); got.code != 0 {
		t.Fatalf("run: %+v", got)
	}
	var res jobs.Result
	if got := submit(t, url, "", "get", "art", "--json"); json.Unmarshal([]byte(got.stdout), &res) != nil || len(res.Artifacts) != 1 {
		t.Fatalf("get: %+v", got)
	}
	_, js := natstest.Connect(t, url)
	store, err := js.ObjectStore(t.Context(), fleet.ArtifactsBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := res.Artifacts[0].Key
	if _, err := store.PutBytes(t.Context(), key, []byte("not the PNG\n")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plot := filepath.Join(dir, "plot.png")
	if err := os.WriteFile(plot, []byte("the user's own\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := submit(t, url, "", "artifacts", "art", "-O", dir)
	if got.code == 0 || !strings.Contains(got.stderr, "digest mismatch") {
		t.Fatalf("a tampered artifact: %+v; want a digest mismatch", got)
	}
	if b, err := os.ReadFile(plot); err != nil || string(b) != "the user's own\n" {
		t.Fatalf("after a failed download, plot.png holds %q (%v); want the user's file untouched", b, err)
	}
	if des, _ := os.ReadDir(dir); len(des) != 1 {
		t.Fatalf("DIR holds %v; want plot.png alone", des)
	}

	if _, err := store.PutBytes(t.Context(), key, []byte("PNG\n")); err != nil {
		t.Fatal(err)
	}
	if got := submit(t, url, "", "artifacts", "art", "-O", dir); got.code != 0 {
		t.Fatalf("download: %+v", got)
	}
	if b, err := os.ReadFile(plot); err != nil || string(b) != "PNG\n" {
		t.Fatalf("plot.png holds %q (%v); want the artifact", b, err)
	}
	if des, _ := os.ReadDir(dir); len(des) != 1 {
		t.Fatalf("DIR holds %v; want plot.png alone", des)
	}
}

// workspace get of a snapshot it refuses, or whose bytes fail their
// digest, exits 1 and leaves DIR as it was: no file of the snapshot in it,
// and no DIR when it made it.
func TestWorkspaceGetRefusedLeavesNothing(t *testing.T) {
	t.Parallel()
	url := setup(t, false)
	for i := range 2 {
		if got := submit(t, url, "", "run", "--workspace", "w", "-c", fmt.Sprintf("write f%d x", i)); got.code != 0 {
			t.Fatalf("step %d: %+v", i, got)
		}
	}
	_, js := natstest.Connect(t, url)
	client, err := jobs.NewClient(t.Context(), js, jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := client.Workspace(t.Context(), "w")
	if err != nil || h.Revision != 2 {
		t.Fatalf("head %+v, %v", h, err)
	}
	store, err := js.ObjectStore(t.Context(), fleet.SnapshotsBucket)
	if err != nil {
		t.Fatal(err)
	}
	// Revision 1 (no digest in the head to check it by) refused after a
	// file and a directory were written; revision 2, the head, whole but
	// not the bytes the head's digest names.
	put := func(rev int64, tarball []byte) {
		if _, err := store.PutBytes(t.Context(), h.Snapshot(rev), tarball); err != nil {
			t.Fatal(err)
		}
	}
	put(1, archivetest.Tar(archivetest.Entry{Name: "ro", Typ: tar.TypeDir, Mode: 0o555}, archivetest.Entry{Name: "ro/a.txt", Data: "a"},
		archivetest.Entry{Name: "z", Typ: tar.TypeSymlink, Link: "/etc/passwd"}))
	put(2, archivetest.Tar(archivetest.Entry{Name: "other.txt", Data: "not revision 2"}))

	dir := t.TempDir()
	made := filepath.Join(dir, "new")
	got := submit(t, url, "", "workspace", "get", "w@1", "-o", made)
	if got.code != 1 || !strings.Contains(got.stderr, "is absolute") {
		t.Errorf("a refused snapshot: %+v; want exit 1 naming the rule", got)
	}
	if _, err := os.Lstat(made); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused snapshot left %s: %v", made, err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	got = submit(t, url, "", "workspace", "get", "w", "-o", empty)
	if got.code != 1 || !strings.Contains(got.stderr, "digest mismatch") {
		t.Errorf("a snapshot failing its digest: %+v; want exit 1, digest mismatch", got)
	}
	if des, err := os.ReadDir(empty); err != nil || len(des) != 0 {
		t.Errorf("a snapshot failing its digest left %v in DIR (%v)", des, err)
	}
}
