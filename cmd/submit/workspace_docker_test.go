package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// A step that leaves a file at a 1,100-byte path (5 directories of 200
// 'D's) in its workspace, on real sandboxes: it succeeds, its result lists
// what the snapshot left out and why, and the next step of the workspace
// runs (the restore takes what the save kept) instead of ending 125.
func TestWorkspaceDeepPathDocker(t *testing.T) {
	t.Parallel()
	url := dockerFleet(t, fmt.Sprintf("deep-docker-%d", os.Getpid()))
	run := func(args ...string) out {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		var o, e bytes.Buffer
		code := runCLI(ctx, append(args, "--nats", url), strings.NewReader(""), &o, &e)
		return out{code, o.String(), e.String()}
	}
	d := strings.Repeat("D", 200)
	dirs := strings.Join([]string{d, d, d, d, d}, "/")
	file := dirs + "/" + strings.Repeat("f", 1100-len(dirs)-1)
	if len(file) != 1100 {
		t.Fatalf("the path is %d bytes", len(file))
	}
	got := run("run", "--image", "shell", "--workspace", "deep", "--id", "deep-1", "--json", "-c",
		fmt.Sprintf("mkdir -p %s && printf x > %s && printf kept > notes.txt && echo saved", dirs, file))
	var res jobs.Result
	if err := json.Unmarshal([]byte(got.stdout), &res); err != nil || got.code != 0 || res.Status != jobs.StatusSucceeded {
		t.Fatalf("the step that leaves the path: exit %d, %v, stdout %q, stderr %q", got.code, err, got.stdout, got.stderr)
	}
	ws := res.Workspace
	if ws == nil || ws.Revision != 1 || ws.Error != "" || len(ws.Skipped) != 1 {
		t.Fatalf("workspace %+v; want revision 1 saved, one entry skipped", ws)
	}
	if s := ws.Skipped[0]; !strings.HasPrefix(file, s.Name+"/") || !strings.Contains(s.Reason, "the path is 401 bytes") || !strings.Contains(s.Reason, "4 entries under it") {
		t.Fatalf("skipped %q: %q; want a directory above the path, 401 bytes, with the 4 entries under it", s.Name, s.Reason)
	}
	t.Logf("skipped %.20s... (%d bytes): %s", ws.Skipped[0].Name, len(ws.Skipped[0].Name), ws.Skipped[0].Reason)

	got = run("run", "--image", "shell", "--workspace", "deep", "--id", "deep-2", "-c", "cat notes.txt; ls -d D*")
	if got.code != 0 || got.stdout != "kept"+d+"\n" {
		t.Fatalf("the next step: exit %d, stdout %q, stderr %q; want 0 and the files kept", got.code, got.stdout, got.stderr)
	}
}
