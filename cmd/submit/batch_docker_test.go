package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/testutil/workertest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/natsembed"
	"github.com/sandfleet/sandfleet/pkg/batch"
	"github.com/sandfleet/sandfleet/pkg/executor"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/worker"
)

// TestBatchHumanEvalDocker runs the first 10 HumanEval problems and 3 with
// broken solutions through `submit batch`, a worker and real sandboxes:
// 10 succeed, 3 fail, exit 1; the rerun reuses all 13. It needs Docker and
// sandfleet/sandbox:latest (workertest.Sandbox). The
// problems are read from $HUMANEVAL, default testdata/humaneval-first10.jsonl.gz
// (the first 10 of HumanEval, MIT licence: testdata/humaneval-LICENSE).
func TestBatchHumanEvalDocker(t *testing.T) {
	t.Parallel()
	data := os.Getenv("HUMANEVAL")
	if data == "" {
		data = filepath.Join("testdata", "humaneval-first10.jsonl.gz")
	}
	problems := readHumanEval(t, data, 10)

	exec := workertest.Sandbox(t, executor.Config{WorkerID: "batch-e2e"})

	srv, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	workertest.Start(t, js, exec, worker.Config{ID: "batch-e2e", Slots: 2, FetchWait: 200 * time.Millisecond})

	// The batch: 10 problems with their solutions (no ids: derived), 3
	// with a solution that returns None.
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for i, p := range problems {
		job := jobs.Job{Image: "python", Code: p.Prompt + p.CanonicalSolution + "\n" + p.Test + "\n\ncheck(" + p.EntryPoint + ")\n",
			Labels: map[string]string{"task_id": p.TaskID, "want": "succeeded"}}
		job.Limits.Timeout = limits.Duration(30 * time.Second)
		enc.Encode(&job)
		if i < 3 {
			job.Code = p.Prompt + "    return None\n\n" + p.Test + "\n\ncheck(" + p.EntryPoint + ")\n"
			job.Labels = map[string]string{"task_id": p.TaskID, "want": "failed"}
			enc.Encode(&job)
		}
	}
	path := filepath.Join(t.TempDir(), "he13.jsonl")
	os.WriteFile(path, in.Bytes(), 0o600)
	outPath := filepath.Join(t.TempDir(), "out.jsonl")

	for run, wantReused := range []int{0, 13} {
		ctx, cancelRun := context.WithTimeout(t.Context(), 5*time.Minute)
		var o, e bytes.Buffer
		code := Run(ctx, []string{"batch", path, "-o", outPath, "--json", "--nats", srv.ClientURL()}, strings.NewReader(""), &o, &e)
		cancelRun()
		var sum batch.Summary
		if err := json.Unmarshal(o.Bytes(), &sum); err != nil || code != 1 {
			t.Fatalf("run %d: exit %d (want 1), stdout %q, stderr %q: %v", run, code, o.String(), e.String(), err)
		}
		t.Logf("run %d: %s", run, o.String())
		if sum.Total != 13 || sum.Statuses[jobs.StatusSucceeded] != 10 || sum.Statuses[jobs.StatusFailed] != 3 || sum.Reused != wantReused {
			t.Errorf("run %d: summary %+v, want 10 succeeded, 3 failed, %d reused", run, sum, wantReused)
		}
		results := readResults(t, outPath)
		if len(results) != 13 {
			t.Errorf("run %d: %d results in OUT", run, len(results))
		}
		for _, r := range results {
			if string(r.Status) != r.Labels["want"] || r.Worker != "batch-e2e" {
				t.Errorf("run %d: %s (%s): %s by %q, want %s; stderr %q", run, r.ID, r.Labels["task_id"], r.Status, r.Worker, r.Labels["want"], r.Stderr)
			}
		}
	}
}

type humanEvalProblem struct {
	TaskID            string `json:"task_id"`
	Prompt            string `json:"prompt"`
	EntryPoint        string `json:"entry_point"`
	CanonicalSolution string `json:"canonical_solution"`
	Test              string `json:"test"`
}

func readHumanEval(t *testing.T, path string, n int) []humanEvalProblem {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("HumanEval data: %v", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []humanEvalProblem
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 1<<20)
	for len(out) < n && sc.Scan() {
		var p humanEvalProblem
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	if len(out) != n {
		t.Fatalf("%s: %d problems, want %d: %v", path, len(out), n, sc.Err())
	}
	return out
}
