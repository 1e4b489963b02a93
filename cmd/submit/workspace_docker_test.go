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

	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// A step that leaves a file at a 1,100-byte path (5 directories of 200
// 'D's) in its workspace, on real sandboxes: it succeeds, its result lists
// what the snapshot left out and why, and the next step of the workspace
// runs (the restore takes what the save kept) instead of ending 125.
// Under runc, and under runsc when the engine has it.
func TestWorkspaceDeepPathDocker(t *testing.T) {
	t.Parallel()
	for _, rt := range sandboxRuntimes(t) {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			deepPathSteps(t, dockerFleetOn(t, fmt.Sprintf("deep-docker-%s-%d", rt, os.Getpid()), rt))
		})
	}
}

// sandboxRuntimes lists runc, and runsc when the engine offers it; the
// test is skipped without Docker (or failed under SANDFLEET_REQUIRE_DOCKER).
func sandboxRuntimes(t *testing.T) []string {
	t.Helper()
	var runtimes []string
	testutil.NeedDocker(t, func(ctx context.Context) error {
		cli, err := client.New(client.FromEnv)
		if err != nil {
			return err
		}
		defer cli.Close()
		info, err := cli.Info(ctx, client.InfoOptions{})
		if err != nil {
			return err
		}
		runtimes = []string{"runc"}
		if _, ok := info.Info.Runtimes["runsc"]; ok {
			runtimes = append(runtimes, "runsc")
		}
		return nil
	})
	return runtimes
}

func deepPathSteps(t *testing.T, url string) {
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
	// step runs one step as job id and returns its result. A sandbox
	// whose launcher died without a verdict (under runsc, now and then,
	// whatever the job: the container exits 2, a crash of the launcher's
	// own, not what this test is about) saved nothing: the step is run
	// again, as a new job, at most twice, and said so.
	step := func(id, code string) (out, jobs.Result) {
		t.Helper()
		var got out
		var res jobs.Result
		for try := range 3 {
			jid := id
			if try > 0 {
				jid = fmt.Sprintf("%s-again-%d", id, try)
			}
			got = run("run", "--image", "shell", "--workspace", "deep", "--id", jid, "--json", "-c", code)
			res = jobs.Result{}
			if err := json.Unmarshal([]byte(got.stdout), &res); err != nil {
				t.Fatalf("%s: exit %d, %v, stdout %q, stderr %q", jid, got.code, err, got.stdout, got.stderr)
			}
			if !strings.Contains(res.Error, "launcher gave no verdict") {
				break
			}
			t.Logf("%s: %s; running the step again", jid, res.Error)
		}
		return got, res
	}
	got, res := step("deep-1", fmt.Sprintf("mkdir -p %s && printf x > %s && printf kept > notes.txt && echo saved", dirs, file))
	if got.code != 0 || res.Status != jobs.StatusSucceeded {
		t.Fatalf("the step that leaves the path: exit %d, %s (%s)", got.code, res.Status, res.Error)
	}
	ws := res.Workspace
	if ws == nil || ws.Revision != 1 || ws.Error != "" || len(ws.Skipped) != 1 {
		t.Fatalf("workspace %+v; want revision 1 saved, one entry skipped", ws)
	}
	if s := ws.Skipped[0]; !strings.HasPrefix(file, s.Name+"/") || !strings.Contains(s.Reason, "the path is 401 bytes") || !strings.Contains(s.Reason, "4 entries under it") {
		t.Fatalf("skipped %q: %q; want a directory above the path, 401 bytes, with the 4 entries under it", s.Name, s.Reason)
	}
	t.Logf("skipped %.20s... (%d bytes): %s", ws.Skipped[0].Name, len(ws.Skipped[0].Name), ws.Skipped[0].Reason)

	got, res = step("deep-2", "cat notes.txt; test -d "+d+" && echo "+d[:3])
	if got.code != 0 || res.Stdout != "kept"+d[:3]+"\n" {
		t.Fatalf("the next step: exit %d, %s, stdout %q, error %q; want 0 and the files kept", got.code, res.Status, res.Stdout, res.Error)
	}
}
