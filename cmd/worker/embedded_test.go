package main

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/natsconn"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// embeddedWorker starts the binary as make run does (--embedded, its
// HTTP API on), on the fake executor, with its server on listen and its
// store in dir.
func embeddedWorker(t *testing.T, listen, dir, execLog string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"--embedded", "--listen", listen, "--data-dir", dir, "--http", testutil.FreeAddr(t),
		"--id", "embedded", "--log-format", "json"}, extra...)
	return startProc(t, "embedded", args, hookFakeExecutor+"=1", hookFakeExecutorLog+"="+execLog)
}

// A force stop of worker --embedded (two SIGTERMs) during a job hands the
// job back, and the embedded server, stopped with the worker, keeps the
// hand-back: once the worker is started again on the same --data-dir the
// job runs at once, not when its lease (10 minutes here) runs out.
func TestEmbeddedForceStopHandBackSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	listen := testutil.FreeAddr(t)
	execLog := filepath.Join(t.TempDir(), "exec.log")
	release := filepath.Join(t.TempDir(), "release")
	metrics := testutil.FreeAddr(t)
	lease := []string{"--ack-wait", "10m"}

	w := embeddedWorker(t, listen, dir, execLog, append(lease, "--metrics", metrics)...)
	client := connectEmbedded(t, listen, dir)
	if _, err := client.Submit(t.Context(), &jobs.Job{ID: "handed-back", Image: "python", Code: "waitfile " + release + "\nprint done"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the job running", func() bool { r, _ := executions(t, execLog); return r["handed-back"] == 1 })
	w.signal(t, syscall.SIGTERM)
	testutil.Eventually(t, 10*time.Second, "draining", func() bool { st, ok := status(t, metrics); return ok && st.Draining })
	w.signal(t, syscall.SIGTERM)
	if code := w.exited(t, 20*time.Second); code != 0 {
		t.Fatalf("forced worker exited %d, want 0", code)
	}
	if n := handBacks(t, w.logs.String())["handed-back"]; n != 1 {
		t.Fatalf("the forced worker handed the job back %d times, want once", n)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	restarted := time.Now()
	w = embeddedWorker(t, listen, dir, execLog, lease...)
	client = connectEmbedded(t, listen, dir)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := client.Wait(ctx, "handed-back")
	if err != nil {
		t.Fatalf("no result 30s after the restart (the lease is 10m): %v", err)
	}
	t.Logf("the handed-back job finished %s after the restart", time.Since(restarted).Round(time.Millisecond))
	if res.Status != jobs.StatusSucceeded || res.Attempt != 2 || res.Stdout != "done\n" {
		t.Errorf("result %+v, want succeeded as attempt 2", res)
	}
	if r, _ := executions(t, execLog); r["handed-back"] != 2 {
		t.Errorf("%d runs, want 2", r["handed-back"])
	}
	w.signal(t, syscall.SIGTERM)
	if code := w.exited(t, 20*time.Second); code != 0 {
		t.Errorf("worker exited %d", code)
	}
}

// connectEmbedded connects to the embedded server of a worker process on
// listen, once it accepts connections and the topology is there.
func connectEmbedded(t *testing.T, listen, dir string) *jobs.Client {
	t.Helper()
	var c *jobs.Client
	err := testutil.Poll(t.Context(), 20*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		nc, js, err := natsconn.JetStream(natsconn.Config{URL: "nats://" + listen, Name: "test"})
		if err != nil {
			return err
		}
		c, err = jobs.NewClient(ctx, js, jobs.Topology{})
		if err != nil {
			nc.Close()
			return err
		}
		t.Cleanup(nc.Close)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
