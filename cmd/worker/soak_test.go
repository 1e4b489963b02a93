package main

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// TestSoakKillRestart: 1,000 short jobs; the worker process is SIGKILLed
// and restarted twice while they run. Every job ends with exactly one
// result (RESULTS took exactly 1,000 writes) and none is lost; jobs in
// flight at a kill run again (at-least-once), after their 1s lease.
//
// It runs the real binary on the fake executor (the test hook), so that it
// takes seconds: what is under test is delivery, not sandboxes.
func TestSoakKillRestart(t *testing.T) {
	t.Parallel()
	const n = 1000
	url, client, js := natsServer(t)
	execLog := filepath.Join(t.TempDir(), "exec.log")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	start := time.Now()
	for i := range n {
		id := fmt.Sprintf("soak-%04d", i)
		if _, err := client.Submit(ctx, &jobs.Job{ID: id, Image: "python", Code: "sleep 20ms\nprint " + id}); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"--slots", "8", "--ack-wait", "1s"}
	stored := func() int { return resultCount(ctx, js) }
	w := fakeWorker(t, url, "soaker", execLog, args...)
	for _, at := range []int{n * 3 / 10, n * 65 / 100} {
		testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("%d results", at), func() bool { return stored() >= at })
		w.kill()
		_, execs := executions(t, execLog)
		t.Logf("SIGKILL at %d results, %d executions started", stored(), execs)
		w = fakeWorker(t, url, "soaker", execLog, args...)
	}
	testutil.Eventually(t, 2*time.Minute, "all results", func() bool { return stored() >= n })
	elapsed := time.Since(start)

	for i := range n {
		echoed(t, ctx, client, fmt.Sprintf("soak-%04d", i))
	}
	results := assertResultWrites(t, ctx, js, n)
	waitJobsDrained(t, ctx, client)
	runs, execs := executions(t, execLog)
	again := 0
	for i := range n {
		id := fmt.Sprintf("soak-%04d", i)
		if runs[id] == 0 {
			t.Errorf("%s has a result but never ran", id)
		}
		again += max(runs[id]-1, 0)
	}
	if len(runs) != n {
		t.Errorf("%d distinct jobs ran, want %d", len(runs), n)
	}
	if again == 0 {
		t.Errorf("no job ran twice: the kills did not land mid-job")
	}
	t.Logf("soak: %d jobs, %d results (each ID once), %d executions (%d re-executions after the kills), 2 SIGKILLs, %s",
		n, results, execs, again, elapsed.Round(time.Millisecond))
	w.signal(t, syscall.SIGTERM)
	if code := w.exited(t, 30*time.Second); code != 0 {
		t.Errorf("last worker exited %d", code)
	}
}
