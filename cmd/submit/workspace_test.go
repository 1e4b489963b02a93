package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
