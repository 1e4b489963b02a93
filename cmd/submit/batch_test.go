package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/batch"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// setupFleet is setup with the fake executor returned, to count runs.
func setupFleet(t *testing.T, slots int) (string, *fakeexec.Executor) {
	t.Helper()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	exec := &fakeexec.Executor{}
	workertest.Start(t, js, exec, worker.Config{ID: "fleet-1", Slots: slots, Version: "v-test"})
	return srv.ClientURL(), exec
}

func writeLines(t *testing.T, name string, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// readResults reads OUT and fails on any line that is not a whole Result.
func readResults(t *testing.T, path string) []jobs.Result {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Errorf("%s ends in a partial line", path)
	}
	var out []jobs.Result
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		var r jobs.Result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.ID == "" || !r.Status.Final() {
			t.Errorf("%s: bad line %q: %v", path, sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

func TestBatchExitCodesAndOutput(t *testing.T) {
	t.Parallel()
	url, _ := setupFleet(t, 2)
	ok := `{"image":"python","code":"print ok"}`
	good := writeLines(t, "good.jsonl", ok, `{"id":"b-own","image":"python","code":"print 2"}`, `{"image":"shell","code":"print 3"}`)
	failing := writeLines(t, "failing.jsonl", ok, `{"image":"python","code":"exit 1"}`)
	bad := writeLines(t, "bad.jsonl", ok, `{"image":"python","code":"print x"}`, `nope`, ``, `{"id":"x y","image":"python"}`)
	tests := []struct {
		name   string
		args   []string
		code   int
		lines  int    // results in OUT
		stderr string // contained in stderr
	}{
		{"all succeed", []string{"batch", good}, 0, 3, "3 of 3 done"},
		{"one fails", []string{"batch", failing}, 1, 2, "failed 1"},
		{"bad lines run the rest", []string{"batch", bad}, 2, 2, bad + ":3: invalid job: not a job object"},
		{"bad line numbers", []string{"batch", bad}, 2, 2, bad + ":5: invalid job: id"},
		{"strict", []string{"batch", "--strict", bad}, 2, -1, "nothing published"},
		{"no file", []string{"batch"}, 2, -1, "one FILE"},
		{"missing file", []string{"batch", filepath.Join(t.TempDir(), "none.jsonl")}, 2, -1, "no such file"},
		{"bad queue", []string{"batch", good, "--queue", "a.b"}, 2, -1, "--queue"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			outPath := filepath.Join(t.TempDir(), "out.jsonl")
			got := submit(t, url, "", append(tc.args, "-o", outPath, "--name", "t-"+strings.ReplaceAll(tc.name, " ", "-"))...)
			if got.code != tc.code || !strings.Contains(got.stderr, tc.stderr) {
				t.Errorf("exit %d, stderr %q; want %d, stderr containing %q", got.code, got.stderr, tc.code, tc.stderr)
			}
			if tc.lines < 0 {
				if _, err := os.Stat(outPath); err == nil {
					t.Errorf("%s written though nothing ran", outPath)
				}
				return
			}
			res := readResults(t, outPath)
			if len(res) != tc.lines {
				t.Errorf("%d results in OUT, want %d", len(res), tc.lines)
			}
			for _, r := range res {
				if r.Labels["batch_line"] == "" {
					t.Errorf("result %s without batch_line", r.ID)
				}
			}
		})
	}
}

func TestBatchJSONSummaryAndStdout(t *testing.T) {
	t.Parallel()
	url, _ := setupFleet(t, 2)
	path := writeLines(t, "sum.jsonl", `{"image":"python","code":"print a"}`, `{"image":"python","code":"exit 4"}`)

	got := submit(t, url, "", "batch", path, "--json")
	var sum batch.Summary
	if err := json.Unmarshal([]byte(got.stdout), &sum); err != nil || got.code != 1 {
		t.Fatalf("--json: exit %d, stdout %q: %v", got.code, got.stdout, err)
	}
	if sum.Name != "sum" || sum.Total != 2 || sum.Done != 2 || sum.Statuses[jobs.StatusFailed] != 1 ||
		sum.Duration.P95 == nil || sum.Interrupted {
		t.Errorf("summary %+v", sum)
	}

	// Without -o or --json the results go to stdout; this rerun reuses them.
	got = submit(t, url, "", "batch", path)
	lines := strings.Split(strings.TrimSpace(got.stdout), "\n")
	if got.code != 1 || len(lines) != 2 || !strings.Contains(got.stderr, "2 reused") {
		t.Errorf("exit %d, stdout %q, stderr %q", got.code, got.stdout, got.stderr)
	}
}

func TestBatchProgressLines(t *testing.T) {
	t.Parallel()
	url, _ := setupFleet(t, 1)
	var lines []string
	for i := range 6 {
		lines = append(lines, fmt.Sprintf(`{"image":"python","code":"sleep 30ms\nprint %d"}`, i))
	}
	path := writeLines(t, "progress.jsonl", lines...)
	got := submit(t, url, "", "batch", path, "--progress-interval", "10ms", "-o", filepath.Join(t.TempDir(), "o"))
	if got.code != 0 || !strings.Contains(got.stderr, "progress: ") || !strings.Contains(got.stderr, "/6 done") {
		t.Errorf("exit %d, stderr %q", got.code, got.stderr)
	}
	if strings.Contains(got.stderr, "\r") {
		t.Error("progress redrawn in place on a non-terminal")
	}
	var o, e bytes.Buffer
	runCLI(t.Context(), []string{"batch", "--help"}, strings.NewReader(""), &o, &e)
	if strings.Contains(o.String(), "progress-interval") || !strings.Contains(o.String(), "--window") {
		t.Errorf("help: %q", o.String())
	}
}

// TestBatchInterruptResume cancels a batch (Ctrl-C) once OUT has a few
// results, checks OUT holds whole lines only and the resume command is
// printed, then runs that command: all results, each job run once.
func TestBatchInterruptResume(t *testing.T) {
	t.Parallel()
	url, exec := setupFleet(t, 2)
	const n = 30
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf(`{"image":"python","code":"sleep 20ms\nprint %d"}`, i))
	}
	path := writeLines(t, "resume.jsonl", lines...)
	outPath := filepath.Join(t.TempDir(), "out.jsonl")
	args := []string{"batch", path, "-o", outPath, "--window", "4", "--nats", url}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	runCtx, interrupt := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { // Ctrl-C once OUT has 5 results
		defer close(watched)
		err := testutil.Poll(runCtx, 30*time.Second, 5*time.Millisecond, func(context.Context) error {
			if data, _ := os.ReadFile(outPath); bytes.Count(data, []byte("\n")) < 5 {
				return errors.New("fewer than 5 results in OUT")
			}
			return nil
		})
		if err == nil {
			interrupt()
		}
	}()
	var o, e bytes.Buffer
	code := runCLI(runCtx, args, strings.NewReader(""), &o, &e)
	interrupt()
	<-watched
	if code != 130 || !strings.Contains(e.String(), "resume with") || !strings.Contains(e.String(), "submit batch "+path+" -o "+outPath) {
		t.Fatalf("interrupted: exit %d, stderr %q", code, e.String())
	}
	first := readResults(t, outPath)
	if len(first) < 5 || len(first) >= n {
		t.Fatalf("%d results after the interrupt, want 5..%d", len(first), n-1)
	}

	o.Reset()
	e.Reset()
	if code := runCLI(ctx, args, strings.NewReader(""), &o, &e); code != 0 {
		t.Fatalf("resumed: exit %d, stderr %q", code, e.String())
	}
	all := readResults(t, outPath)
	seen := map[string]bool{}
	for _, r := range all {
		if seen[r.ID] {
			t.Errorf("%s twice in OUT", r.ID)
		}
		seen[r.ID] = true
		if runs := exec.Runs(r.ID); runs != 1 {
			t.Errorf("%s ran %d times", r.ID, runs)
		}
	}
	for _, r := range first {
		if !seen[r.ID] {
			t.Errorf("%s of the first run missing after the resume", r.ID)
		}
	}
	if len(all) != n || exec.Total() != n {
		t.Errorf("%d results, %d runs; want %d", len(all), exec.Total(), n)
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	url, _ := setupFleet(t, 3)
	var st jobs.FleetStatus
	// The first heartbeat is written as the worker starts, not ready until
	// its executor answered a ping; the next says ready.
	testutil.Eventually(t, 60*time.Second, "a ready worker and a queue in status --json", func() bool {
		got := submit(t, url, "", "status", "--json")
		if got.code == exitUnavailable {
			// The in-process server can take over the CLI's 10 s to open
			// the topology while the whole suite loads the machine: ask
			// again, as a user would.
			t.Logf("status --json: %+v", got)
			return false
		}
		if got.code != 0 {
			t.Fatalf("status --json: %+v", got)
		}
		if err := json.Unmarshal([]byte(got.stdout), &st); err != nil {
			t.Fatalf("%q: %v", got.stdout, err)
		}
		return len(st.Workers) > 0 && st.Workers[0].Ready && len(st.Queues) > 0
	})
	if len(st.Workers) != 1 || st.Workers[0].ID != "fleet-1" || st.Workers[0].Slots != 3 ||
		st.Workers[0].Version != "v-test" || !st.Workers[0].Ready || st.Workers[0].LastSeen.IsZero() {
		t.Errorf("workers %+v", st.Workers)
	}
	if len(st.Queues) != 1 || st.Queues[0].Queue != "default" {
		t.Errorf("queues %+v", st.Queues)
	}
	got := submit(t, url, "", "status")
	for _, want := range []string{"WORKER", "fleet-1", "0/3 busy", "v-test", "QUEUE", "PENDING", "default"} {
		if !strings.Contains(got.stdout, want) {
			t.Errorf("status table lacks %q:\n%s", want, got.stdout)
		}
	}
}

func TestStatusQueueDepth(t *testing.T) {
	t.Parallel()
	url := setup(t, true) // no worker: jobs stay queued
	for i := range 3 {
		if got := submit(t, url, "", "run", "--detach", "-c", fmt.Sprint("print ", i)); got.code != 0 {
			t.Fatalf("%+v", got)
		}
	}
	// A consumer, as a worker of queue "default" creates it.
	_, js := natstest.Connect(t, url)
	if _, err := (fleet.Topology{}).EnsureConsumer(t.Context(), js, "default"); err != nil {
		t.Fatal(err)
	}
	got := submit(t, url, "", "status", "--json")
	var st jobs.FleetStatus
	if err := json.Unmarshal([]byte(got.stdout), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Workers) != 0 || len(st.Queues) != 1 || st.Queues[0].Pending != 3 || st.Queues[0].InFlight != 0 || st.Messages != 3 {
		t.Errorf("status %+v", st)
	}
}

// A rerun into an OUT that already holds results writes beside it: when
// it is interrupted having written fewer, OUT and its manifest stay as
// the run before left them; a rerun that finishes takes their place.
func TestBatchInterruptedRerunKeepsOut(t *testing.T) {
	t.Parallel()
	url, exec := setupFleet(t, 2)
	const n = 20
	var done, slow []string
	for i := range n {
		done = append(done, fmt.Sprintf(`{"image":"python","code":"print %d"}`, i))
		slow = append(slow, fmt.Sprintf(`{"image":"python","code":"sleep 100ms\nprint %d"}`, i))
	}
	outPath := filepath.Join(t.TempDir(), "out.jsonl")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var o, e bytes.Buffer
	first := []string{"batch", writeLines(t, "first.jsonl", done...), "-o", outPath, "--nats", url}
	if code := runCLI(ctx, first, strings.NewReader(""), &o, &e); code != 0 {
		t.Fatalf("first run: exit %d, stderr %q", code, e.String())
	}
	before, _ := os.ReadFile(outPath)
	manifest, _ := os.ReadFile(manifestPath(outPath))
	if len(readResults(t, outPath)) != n || len(manifest) == 0 {
		t.Fatalf("first run: %d results, manifest %q", len(readResults(t, outPath)), manifest)
	}

	// Another batch into the same OUT, interrupted a few jobs in.
	second := []string{"batch", writeLines(t, "second.jsonl", slow...), "-o", outPath, "--window", "2", "--nats", url}
	runCtx, interrupt := context.WithCancel(ctx)
	go func() {
		_ = testutil.Poll(runCtx, 30*time.Second, 5*time.Millisecond, func(context.Context) error {
			if exec.Total() < n+3 {
				return errors.New("the second batch has not run 3 jobs")
			}
			return nil
		})
		interrupt()
	}()
	o.Reset()
	e.Reset()
	code := runCLI(runCtx, second, strings.NewReader(""), &o, &e)
	interrupt()
	if code != 130 || !strings.Contains(e.String(), "left as it was") {
		t.Fatalf("interrupted rerun: exit %d, stderr %q", code, e.String())
	}
	if after, _ := os.ReadFile(outPath); !bytes.Equal(after, before) {
		t.Errorf("OUT after the interrupted rerun: %d results, want the first run's %d", len(readResults(t, outPath)), n)
	}
	if after, _ := os.ReadFile(manifestPath(outPath)); !bytes.Equal(after, manifest) {
		t.Errorf("the manifest changed by the interrupted rerun:\n%s", after)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(outPath), ".*partial")); len(left) > 0 {
		t.Errorf("left beside OUT: %q", left)
	}

	o.Reset()
	e.Reset()
	if code := runCLI(ctx, second, strings.NewReader(""), &o, &e); code != 0 {
		t.Fatalf("finished rerun: exit %d, stderr %q", code, e.String())
	}
	for _, r := range readResults(t, outPath) {
		if !strings.HasPrefix(r.ID, "second-") {
			t.Errorf("after the finished rerun OUT has %s", r.ID)
		}
	}
	if got := len(readResults(t, outPath)); got != n {
		t.Errorf("after the finished rerun: %d results, want %d", got, n)
	}
}

// FILE must be a regular file: a FIFO is refused at once (exit 2), not
// waited on for a writer; and -o naming FILE itself is refused before its
// jobs could be replaced by their results.
func TestBatchRefusesFIFOAndOutIsFile(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "jobs.jsonl")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		var o, e bytes.Buffer
		code := runCLI(t.Context(), []string{"batch", fifo, "--nats", "nats://127.0.0.1:1"}, strings.NewReader(""), &o, &e)
		done <- fmt.Sprintf("exit %d: %s", code, e.String())
	}()
	select {
	case got := <-done:
		if !strings.HasPrefix(got, "exit 2:") || !strings.Contains(got, "not a regular file") {
			t.Errorf("a FIFO: %s", got)
		}
	case <-time.After(10 * time.Second):
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil { // lets the open end
			w.Close()
		}
		<-done
		t.Fatal("submit batch FIFO still running after 10s: blocked opening it")
	}

	path := writeLines(t, "self.jsonl", `{"image":"python","code":"print 1"}`)
	var o, e bytes.Buffer
	if code := runCLI(t.Context(), []string{"batch", path, "-o", path, "--nats", "nats://127.0.0.1:1"}, strings.NewReader(""), &o, &e); code != 2 ||
		!strings.Contains(e.String(), "FILE itself") {
		t.Errorf("-o FILE: exit %d, %q", code, e.String())
	}
	if data, _ := os.ReadFile(path); !strings.Contains(string(data), `"print 1"`) {
		t.Errorf("FILE after -o FILE: %q", data)
	}
}

// Results on the terminal that shows the live progress line: each result
// starts a line of its own, never glued onto the progress text.
func TestBatchResultsAndProgressOnOneTerminal(t *testing.T) {
	t.Parallel()
	url, _ := setupFleet(t, 1)
	var lines []string
	for i := range 6 {
		lines = append(lines, fmt.Sprintf(`{"image":"python","code":"sleep 150ms\nprint %d"}`, i))
	}
	path := writeLines(t, "tty.jsonl", lines...)
	var tty testutil.Buffer // the terminal's screen: stdout and stderr alike
	m := &Main{Stdin: strings.NewReader(""), Stdout: &tty, Stderr: &tty, IsTerminal: func(io.Writer) bool { return true }}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	code := exitCode(m.Run(ctx, []string{"batch", path, "--window", "1", "--progress-interval", "20ms", "--nats", url}), &tty)
	out := tty.String()
	if code != 0 {
		t.Fatalf("exit %d: %q", code, out)
	}
	results := 0
	for l := range strings.SplitSeq(out, "\n") {
		if i := strings.LastIndex(l, "\r\x1b[K"); i >= 0 {
			l = l[i+len("\r\x1b[K"):]
		}
		switch j := strings.Index(l, `{"id"`); {
		case j > 0:
			t.Errorf("a result glued onto the progress line: %q", l)
		case j == 0:
			results++
		}
	}
	if results != 6 || !strings.Contains(out, "done (") {
		t.Errorf("%d results, progress shown: %v\n%s", results, strings.Contains(out, "done ("), out)
	}
}

// A rerun into a bare -o OUT (relative, in the working directory) writes
// its results beside OUT, whatever $TMPDIR is: one on another filesystem
// made the final rename fail, and the run's results were thrown away.
func TestBatchRerunIntoARelativeOut(t *testing.T) {
	url, _ := setupFleet(t, 2)
	tmp, err := os.MkdirTemp("/dev/shm", "sandfleet-tmpdir-")
	if err != nil {
		t.Skip("no /dev/shm:", err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	t.Setenv("TMPDIR", tmp) // a tmpfs: another filesystem than the working directory's
	t.Chdir(t.TempDir())
	path := writeLines(t, "jobs.jsonl", `{"image":"python","code":"print 1"}`, `{"image":"python","code":"print 2"}`)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for run := range 2 {
		var o, e bytes.Buffer
		if code := runCLI(ctx, []string{"batch", path, "-o", "out.jsonl", "--nats", url}, strings.NewReader(""), &o, &e); code != 0 {
			t.Fatalf("run %d: exit %d: %s", run+1, code, e.String())
		}
		if got := len(readResults(t, "out.jsonl")); got != 2 {
			t.Errorf("run %d: %d results in OUT, want 2", run+1, got)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "*")); len(left) > 0 {
		t.Errorf("left in $TMPDIR: %q", left)
	}
}
