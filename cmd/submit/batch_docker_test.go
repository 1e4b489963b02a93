package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/examples/problems"
	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/batch"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// TestBatchExamplesDocker runs the project's own problems
// (examples/problems) and 3 with broken solutions through `submit batch`,
// a worker and real sandboxes: 12 succeed, 3 fail, exit 1; the rerun
// reuses all 15. It needs Docker and sandfleet/sandbox:latest
// (workertest.Sandbox).
func TestBatchExamplesDocker(t *testing.T) {
	t.Parallel()
	runProblems(t, "examples", problems.Examples(), 3)
}

// TestBatchHumanEvalDocker does the same with the real workload, the first
// 10 problems of HumanEval, which the repository does not carry: it reads
// $HUMANEVAL or ../shared/data/humaneval/HumanEval.jsonl.gz beside the
// repository, and is skipped, saying where to get the file, without either.
func TestBatchHumanEvalDocker(t *testing.T) {
	t.Parallel()
	path := testutil.HumanEval(t)
	ps, err := problems.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) < 10 {
		t.Fatalf("%s: %d problems, want at least 10", path, len(ps))
	}
	runProblems(t, "humaneval", ps[:10], 3)
}

// runProblems runs a batch of ps with their canonical solutions and, for
// the first broken of them, with problems.BrokenSolution, twice: the first
// run executes every job, the second reuses every stored result.
func runProblems(t *testing.T, name string, ps []problems.Problem, broken int) {
	t.Helper()
	exec := workertest.Sandbox(t, executor.Config{WorkerID: "batch-" + name})
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	workertest.Start(t, js, exec, worker.Config{ID: "batch-" + name, Slots: 2, FetchWait: 200 * time.Millisecond})

	// The batch: the problems with their solutions (no ids: derived), then
	// the broken ones.
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for i, p := range ps {
		job := jobs.Job{Image: "python", Code: p.Code(p.CanonicalSolution),
			Labels: map[string]string{"task_id": p.TaskID, "want": "succeeded"}}
		job.Limits.Timeout = limits.Duration(30 * time.Second)
		enc.Encode(&job)
		if i < broken {
			job.Code = p.Code(problems.BrokenSolution)
			job.Labels = map[string]string{"task_id": p.TaskID, "want": "failed"}
			enc.Encode(&job)
		}
	}
	path := filepath.Join(t.TempDir(), name+".jsonl")
	if err := os.WriteFile(path, in.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	outPath := filepath.Join(t.TempDir(), "out.jsonl")

	total := len(ps) + broken
	for run, wantReused := range []int{0, total} {
		ctx, cancelRun := context.WithTimeout(t.Context(), 5*time.Minute)
		var o, e bytes.Buffer
		code := runCLI(ctx, []string{"batch", path, "-o", outPath, "--json", "--nats", srv.ClientURL()}, strings.NewReader(""), &o, &e)
		cancelRun()
		var sum batch.Summary
		if err := json.Unmarshal(o.Bytes(), &sum); err != nil || code != 1 {
			t.Fatalf("run %d: exit %d (want 1), stdout %q, stderr %q: %v", run, code, o.String(), e.String(), err)
		}
		t.Logf("run %d: %s", run, o.String())
		if sum.Total != total || sum.Statuses[jobs.StatusSucceeded] != len(ps) || sum.Statuses[jobs.StatusFailed] != broken || sum.Reused != wantReused {
			t.Errorf("run %d: summary %+v, want %d succeeded, %d failed, %d reused", run, sum, len(ps), broken, wantReused)
		}
		results := readResults(t, outPath)
		if len(results) != total {
			t.Errorf("run %d: %d results in OUT, want %d", run, len(results), total)
		}
		for _, r := range results {
			if string(r.Status) != r.Labels["want"] || r.Worker != "batch-"+name {
				t.Errorf("run %d: %s (%s): %s by %q, want %s; stderr %q", run, r.ID, r.Labels["task_id"], r.Status, r.Worker, r.Labels["want"], r.Stderr)
			}
		}
	}
}
