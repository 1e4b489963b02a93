package main

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// sessionSteps are an agent's ten tool calls on one workspace: write a
// file, append to it, run a script that reads it, make a PNG with zlib
// and struct, fetch it. Each also appends its number to steps.log, so
// that the log counts how many times each step's effect was applied.
func sessionSteps() []*jobs.Job {
	logLine := func(n int) string { return fmt.Sprintf("open('steps.log', 'a').write('step %d\\n')\n", n) }
	analyze := `import csv
rows = list(csv.DictReader(open("data.csv")))
print("rows", len(rows), "sum", sum(int(r["y"]) for r in rows))
`
	plot := `import csv, struct, zlib
rows = list(csv.DictReader(open("data.csv")))
w, h = 4 * len(rows), 32
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
raw = b""
for y in range(h):
    raw += b"\x00"
    for x in range(w):
        on = h - y <= 3 * int(rows[x // 4]["y"])
        raw += bytes([30, 90, 200]) if on else bytes([255, 255, 255])
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
png += chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
open("plot.png", "wb").write(png)
print("plot.png", w, "x", h)
`
	rows := func(from, to int) string {
		var b strings.Builder
		for i := from; i <= to; i++ {
			fmt.Fprintf(&b, "%d,%d\\n", i, i)
		}
		return b.String()
	}
	code := []string{
		1:  "open('data.csv', 'w').write('x,y\\n" + rows(1, 3) + "')\n",
		2:  "open('data.csv', 'a').write('" + rows(4, 6) + "')\n",
		3:  "print('analyze.py is here:', open('analyze.py').read().count('\\n'), 'lines')\n",
		4:  "import runpy\nrunpy.run_path('analyze.py')\n",
		5:  "open('data.csv', 'a').write('" + rows(7, 9) + "')\nprint(sum(1 for _ in open('data.csv')) - 1, 'rows')\n",
		6:  "import runpy\nrunpy.run_path('analyze.py')\n",
		7:  "print('plot.py is here')\n",
		8:  "import runpy\nrunpy.run_path('plot.py')\n",
		9:  "import os\nprint(sorted(os.listdir('.')))\n",
		10: "print(open('steps.log').read(), end='')\n",
	}
	var steps []*jobs.Job
	for n := 1; n <= 10; n++ {
		j := &jobs.Job{ID: fmt.Sprintf("step-%02d", n), Image: "python", Workspace: "agent-7", Code: logLine(n) + code[n]}
		switch n {
		case 3:
			j.Files = map[string]string{"analyze.py": analyze}
		case 7:
			j.Files = map[string]string{"plot.py": plot}
		case 10:
			j.Outputs = []string{"*.png"}
		}
		steps = append(steps, j)
	}
	return steps
}

// sessionServer starts a JetStream server with a user per worker process,
// "worker-a" and "worker-b", of which only worker-a may not publish to the
// subjects in deny (a real fault: the server refuses the write), and a
// "client".
func sessionServer(t *testing.T, deny ...string) *server.Server {
	t.Helper()
	all := &server.SubjectPermission{Allow: []string{">"}}
	return natstest.ServerWith(t, &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), MaxPayload: 8 << 20,
		Users: []*server.User{
			{Username: "worker-a", Password: "apass", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: deny}, Subscribe: all}},
			{Username: "worker-b", Password: "bpass"},
			{Username: "client", Password: "cpass"},
		},
	})
}

// testImageConfig returns the flags that make the worker's presets use
// the sandbox image SANDFLEET_TEST_IMAGE names, when set: a branch's own
// image, while other branches rebuild the shared tag with launchers that
// know no workspaces. None when unset.
func testImageConfig(t *testing.T) []string {
	img := os.Getenv("SANDFLEET_TEST_IMAGE")
	if img == "" {
		return nil
	}
	return []string{"--config", writeConfig(t, map[string]executor.Preset{
		"python": {Image: img, MainFile: "main.py", Argv: []string{"python3", "main.py"}},
		"shell":  {Image: img, MainFile: "main.sh", Argv: []string{"sh", "main.sh"}},
	})}
}

// An agent's ten-step workspace session, on real Docker and two worker processes
// of one slot each. Worker A runs step 5: it saves its snapshot (revision
// 5) and then cannot store its result (the server refuses A that one
// write), and is SIGKILLed right there, with the head saying
// saved(step-05). Worker B gets step 5 again when its lease runs out: it
// runs it against revision 4, saves nothing, and reports revision 5. The
// session completes, and every step's effect is applied exactly once:
// steps.log has 10 lines, not 11, and data.csv 9 rows, not 12.
func TestBinaryWorkspaceSessionDocker(t *testing.T) {
	t.Parallel()
	probe := executor.Config{WorkerID: "probe"}
	if img := os.Getenv("SANDFLEET_TEST_IMAGE"); img != "" {
		probe.Presets = map[string]executor.Preset{"python": {Image: img, MainFile: "main.py", Argv: []string{"python3", "main.py"}}}
	}
	workertest.Sandbox(t, probe) // Docker and the image answer, or skip
	srv := sessionServer(t, "$KV.RESULTS.step-05")
	url := srv.ClientURL()
	_, js := natstest.Connect(t, url, nats.UserInfo("client", "cpass"))
	client, err := jobs.NewClient(t.Context(), js, jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := uniqueID("ws-a"), uniqueID("ws-b")
	args := append([]string{"--ack-wait", "3s", "--slots", "1"}, testImageConfig(t)...)
	workers := map[string]*proc{
		a: dockerWorker(t, strings.Replace(url, "nats://", "nats://worker-a:apass@", 1), a, args...),
		b: dockerWorker(t, strings.Replace(url, "nats://", "nats://worker-b:bpass@", 1), b, args...),
	}

	ctx := t.Context()
	holder := func(ws string) string {
		var h *jobs.WorkspaceHead
		testutil.Eventually(t, 2*time.Minute, ws+" held", func() bool {
			h, err = client.Workspace(ctx, ws)
			return err == nil && h.Step != nil
		})
		return h.Step.Worker
	}
	// block takes a worker's one slot with a job holding workspace ws, and
	// returns the worker.
	block := func(id, ws string) string {
		if _, err := client.Submit(ctx, &jobs.Job{ID: id, Image: "python", Workspace: ws, Code: "import time\ntime.sleep(300)",
			Limits: limits.Limits{Timeout: limits.Duration(5 * time.Minute)}}); err != nil {
			t.Fatal(err)
		}
		return holder(ws)
	}
	unblock := func(id string) {
		if res, err := client.Cancel(ctx, id); err != nil || res.Status != jobs.StatusCanceled {
			t.Fatalf("cancel %s: %v %+v", id, err, res)
		}
	}

	results := map[int]*jobs.Result{}
	var blockers map[string]string // worker → the blocker job holding its slot
	for n, j := range sessionSteps() {
		n++
		sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		if n == 5 {
			// Both workers busy with a blocker each, then A's canceled:
			// A is the one free slot when step 5 comes.
			blockers = map[string]string{block("blocker-1", "hold-1"): "blocker-1"}
			blockers[block("blocker-2", "hold-2")] = "blocker-2"
			if blockers[a] == "" || blockers[b] == "" {
				t.Fatalf("blockers held by %v, want one on each worker", blockers)
			}
			unblock(blockers[a])
		}
		rw, err := client.Watch(sctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Submit(sctx, j); err != nil {
			t.Fatal(err)
		}
		if n == 5 {
			// Saved, result refused: the head says saved(step-05) at
			// revision 5. Kill the worker holding it, right there.
			var h *jobs.WorkspaceHead
			testutil.Eventually(t, 2*time.Minute, "step 5 saved", func() bool {
				h, err = client.Workspace(ctx, "agent-7")
				return err == nil && h.Step != nil && h.Step.Job == j.ID && h.Step.State == jobs.StepSaved
			})
			if h.Revision != 5 || h.Step.Base.Revision != 4 || h.Step.Worker != a {
				t.Fatalf("head after step 5's save: %+v %+v; want revision 5 from 4, by %s", h, *h.Step, a)
			}
			workers[a].kill()
			t.Logf("killed %s after it saved revision 5 (head %+v)", a, *h.Step)
			delete(workers, a)
			unblock(blockers[b]) // B takes step 5 once its lease runs out
		}
		res, err := rw.Next(sctx)
		rw.Stop()
		cancel()
		if err != nil {
			t.Fatalf("step %d: %v", n, err)
		}
		if res.Status != jobs.StatusSucceeded || res.Workspace == nil {
			t.Fatalf("step %d: %s %q stdout %q stderr %q workspace %+v", n, res.Status, res.Error, res.Stdout, res.Stderr, res.Workspace)
		}
		if res.Workspace.From.Revision != int64(n-1) || res.Workspace.Revision != int64(n) {
			t.Fatalf("step %d: from %d to %d, want %d to %d", n, res.Workspace.From.Revision, res.Workspace.Revision, n-1, n)
		}
		t.Logf("step %d: attempt %d on %s, revision %d → %d, %d bytes, replayed %v: %q",
			n, res.Attempt, res.Worker, res.Workspace.From.Revision, res.Workspace.Revision, res.Workspace.SizeBytes, res.Workspace.Replayed, res.Stdout)
		results[n] = res
	}

	five := results[5]
	if five.Attempt < 2 || !five.Workspace.Replayed || workers[five.Worker] == nil {
		t.Fatalf("step 5: attempt %d on %s, replayed %v: want a later attempt, replayed, on the surviving worker", five.Attempt, five.Worker, five.Workspace.Replayed)
	}
	if five.Stdout != "9 rows\n" {
		t.Fatalf("step 5 replayed against revision 4 must see 9 rows: %q", five.Stdout)
	}
	if got := results[6].Stdout; got != "rows 9 sum 45\n" {
		t.Fatalf("step 6 (rows appended once): %q", got)
	}
	wantLog := ""
	for n := 1; n <= 10; n++ {
		wantLog += fmt.Sprintf("step %d\n", n)
	}
	if got := results[10].Stdout; got != wantLog {
		t.Fatalf("steps.log at step 10:\n%s\nwant 10 lines, each step once", got)
	}

	for _, w := range workers {
		w.signal(t, syscall.SIGTERM) // drains, removes its warm pool
		if code := w.exited(t, time.Minute); code != 0 {
			t.Errorf("worker exited %d", code)
		}
	}
	// What the killed worker left (its last sandbox, its warm pool, maybe
	// created after the kill) is what a restart under its ID would reap.
	if left := containers(t, executor.LabelWorker+"="+a); len(left) > 0 {
		t.Logf("reaping %d containers the killed worker left", len(left))
		_ = exec.Command("docker", append([]string{"rm", "-f"}, left...)...).Run()
	}

	// The artifact: a real PNG, 36x32 (nine bars of four pixels).
	ten := results[10]
	if len(ten.Artifacts) != 1 || ten.Artifacts[0].Name != "plot.png" {
		t.Fatalf("step 10 artifacts: %+v skipped %+v %q", ten.Artifacts, ten.ArtifactsSkipped, ten.ArtifactsError)
	}
	var pngBytes bytes.Buffer
	if err := client.WriteArtifact(ctx, ten.Artifacts[0], &pngBytes); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&pngBytes)
	if err != nil || img.Bounds().Dx() != 36 || img.Bounds().Dy() != 32 {
		t.Fatalf("plot.png: %v %v", err, img)
	}

	// The workspace, downloaded: ten revisions, the last by step 10.
	h, err := client.Workspace(ctx, "agent-7")
	if err != nil || h.Revision != 10 || h.Job != "step-10" {
		t.Fatalf("head %+v %v", h, err)
	}
	dir := filepath.Join(t.TempDir(), "agent-7")
	if _, _, err := client.ExtractWorkspace(ctx, jobs.WorkspaceRef{Name: "agent-7"}, dir); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"steps.log": wantLog} {
		if b, _ := os.ReadFile(filepath.Join(dir, name)); string(b) != want {
			t.Fatalf("%s: %q", name, b)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "data.csv")); strings.Count(string(b), "\n") != 10 {
		t.Fatalf("data.csv: %q, want a header and 9 rows", b)
	}
}
