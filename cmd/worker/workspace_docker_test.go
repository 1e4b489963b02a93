package main

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/pkg/executor"
	"github.com/sandfleet/sandfleet/pkg/jobs"
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

// sessionServer starts a JetStream server whose "worker" user may not
// publish to the subjects in deny (a real fault: the server refuses the
// write), and returns it with a function that lifts the denial.
func sessionServer(t *testing.T, deny ...string) (*server.Server, func()) {
	t.Helper()
	storeDir := t.TempDir()
	opts := func(deny []string, port int) *server.Options {
		all := &server.SubjectPermission{Allow: []string{">"}}
		return &server.Options{
			Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: storeDir, MaxPayload: 8 << 20,
			NoSigs: true, NoLog: true,
			Users: []*server.User{
				{Username: "worker", Password: "wpass", Permissions: &server.Permissions{
					Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: deny}, Subscribe: all}},
				{Username: "client", Password: "cpass"},
			},
		}
	}
	srv := natstest.ServerWith(t, opts(deny, -1))
	port := srv.Addr().(*net.TCPAddr).Port
	return srv, func() {
		if err := srv.ReloadOptions(opts(nil, port)); err != nil {
			t.Errorf("lift the denial: %v", err)
		}
	}
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
	cfg := fmt.Sprintf(`{"presets": {
		"python": {"image": %q, "main_file": "main.py", "argv": ["python3", "main.py"]},
		"shell": {"image": %q, "main_file": "main.sh", "argv": ["sh", "main.sh"]}}}`, img, img)
	path := filepath.Join(t.TempDir(), "worker.json")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--config", path}
}

// The agent session of issue 12, on real Docker and two worker processes.
// The worker that runs step 5 saves its snapshot (revision 5) and then
// cannot store its result (the server refuses the write); it is SIGKILLed
// right there, with the head saying saved(step-05). The other worker gets
// step 5 again when its lease runs out: it runs it against revision 4,
// saves nothing, and reports revision 5. The session completes, and every
// step's effect is applied exactly once: steps.log has 10 lines, not 11,
// and data.csv 9 rows, not 12.
func TestBinaryWorkspaceSessionDocker(t *testing.T) {
	t.Parallel()
	probe := executor.Config{WorkerID: "probe"}
	if img := os.Getenv("SANDFLEET_TEST_IMAGE"); img != "" {
		probe.Presets = map[string]executor.Preset{"python": {Image: img, MainFile: "main.py", Argv: []string{"python3", "main.py"}}}
	}
	workertest.Sandbox(t, probe) // Docker and the image answer, or skip
	srv, lift := sessionServer(t, "$KV.RESULTS.step-05")
	url := srv.ClientURL()
	_, js := natstest.Connect(t, url, nats.UserInfo("client", "cpass"))
	client, err := jobs.NewClient(t.Context(), js, jobs.Topology{})
	if err != nil {
		t.Fatal(err)
	}
	wurl := strings.Replace(url, "nats://", "nats://worker:wpass@", 1)
	ids := []string{uniqueID("ws-a"), uniqueID("ws-b")}
	workers := map[string]*proc{}
	args := append([]string{"--ack-wait", "3s", "--slots", "1"}, testImageConfig(t)...)
	for _, id := range ids {
		workers[id] = dockerWorker(t, wurl, id, args...)
	}

	ctx := t.Context()
	results := map[int]*jobs.Result{}
	victim := ""
	for n, j := range sessionSteps() {
		n++
		sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
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
			if h.Revision != 5 || h.Step.Base.Revision != 4 {
				t.Fatalf("head after step 5's save: %+v", h)
			}
			victim = h.Step.Worker
			workers[victim].kill()
			t.Logf("killed %s after it saved revision 5 (head %+v)", victim, *h.Step)
			delete(workers, victim)
			lift()
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
	if left := containers(t, executor.LabelWorker+"="+victim); len(left) > 0 {
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
