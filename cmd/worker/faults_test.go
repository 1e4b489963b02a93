package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// fakeWorker starts the binary on the fake executor (the test hook), with
// the execution log at logPath.
func fakeWorker(t *testing.T, url, id, logPath string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"--nats", url, "--id", id, "--log-format", "json"}, extra...)
	return startProc(t, id, args, hookFakeExecutor+"=1", hookFakeExecutorLog+"="+logPath)
}

func status(t *testing.T, addr string) (jobs.WorkerStatus, bool) {
	code, body := httpGet("http://" + addr + "/status")
	var st jobs.WorkerStatus
	return st, code == 200 && json.Unmarshal([]byte(body), &st) == nil
}

// SIGTERM drains: the worker stops pulling (a job queued after the signal
// goes to another worker), keeps the lease of the job in flight alive (it
// runs three times longer than --ack-wait and is not redelivered to the
// other worker), finishes and acks it, and exits 0.
func TestBinaryDrain(t *testing.T) {
	t.Parallel()
	url, client, _ := natsServer(t)
	execLog := filepath.Join(t.TempDir(), "exec.log")
	metrics := testutil.FreeAddr(t)
	drainer := fakeWorker(t, url, "drainer", execLog, "--slots", "2", "--ack-wait", "1s", "--grace", "30s", "--metrics", metrics)
	testutil.Eventually(t, 20*time.Second, "drainer ready", func() bool { c, _ := httpGet("http://" + metrics + "/readyz"); return c == 200 })

	// The job runs until the test releases it, so that the drain is
	// observed while it is in flight however slow the machine is.
	release := filepath.Join(t.TempDir(), "release")
	if _, err := client.Submit(t.Context(), &jobs.Job{ID: "long", Image: "python", Code: "waitfile " + release + "\nprint long"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "long job running", func() bool { r, _ := executions(t, execLog); return r["long"] == 1 })
	started := time.Now()
	spare := fakeWorker(t, url, "spare", execLog, "--slots", "2", "--ack-wait", "1s")

	signaled := time.Now()
	drainer.signal(t, syscall.SIGTERM)
	testutil.Eventually(t, 10*time.Second, "status says draining", func() bool { st, ok := status(t, metrics); return ok && st.Draining && st.Busy == 1 })
	if _, err := client.Submit(t.Context(), &jobs.Job{ID: "after", Image: "python", Code: "print after"}); err != nil {
		t.Fatal(err)
	}
	// Hold the job for three leases (--ack-wait 1s): without the drainer's
	// InProgress heartbeats the spare worker would get it a second time.
	testutil.Eventually(t, 10*time.Second, "three leases gone by", func() bool { return time.Since(started) > 3*time.Second })
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := drainer.exited(t, 30*time.Second); code != 0 {
		t.Errorf("drained worker exited %d, want 0", code)
	}
	t.Logf("drain took %s", time.Since(signaled).Round(time.Millisecond))

	res, err := client.Get(t.Context(), "long")
	if err != nil || res.Status != jobs.StatusSucceeded || res.Worker != "drainer" || res.Attempt != 1 || res.Stdout != "long\n" {
		t.Errorf("drained job: %v %+v", err, res)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err = client.Wait(ctx, "after")
	if err != nil || res.Status != jobs.StatusSucceeded || res.Worker != "spare" {
		t.Errorf("job queued during the drain: %v %+v", err, res)
	}
	if runs, _ := executions(t, execLog); runs["long"] != 1 || runs["after"] != 1 {
		t.Errorf("executions %v, want long and after once each", runs)
	}
	if logs := drainer.logs.String(); !strings.Contains(logs, `"msg":"draining"`) || !strings.Contains(logs, `"msg":"worker stopped"`) {
		t.Errorf("drain not logged:\n%s", logs)
	}
	spare.signal(t, syscall.SIGTERM)
	if code := spare.exited(t, 30*time.Second); code != 0 {
		t.Errorf("spare exited %d", code)
	}
}

// A second SIGTERM, or the end of --grace after the first, forces: the
// job in flight is stopped and naked for immediate redelivery (the lease
// is 30s; another worker gets it within seconds), no result is stored, the
// worker exits 0. Nothing is lost: the job runs again elsewhere.
func TestBinaryForce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		grace string
		again bool
	}{
		{"second signal", "1m", true},
		{"grace over", "500ms", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, client, _ := natsServer(t)
			execLog := filepath.Join(t.TempDir(), "exec.log")
			metrics := testutil.FreeAddr(t)
			w := fakeWorker(t, url, "forced", execLog, "--slots", "1", "--ack-wait", "30s", "--grace", tc.grace, "--metrics", metrics)
			if _, err := client.Submit(t.Context(), &jobs.Job{ID: "stuck", Image: "python", Code: "block"}); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 20*time.Second, "job running", func() bool { r, _ := executions(t, execLog); return r["stuck"] == 1 })
			w.signal(t, syscall.SIGTERM)
			testutil.Eventually(t, 10*time.Second, "draining", func() bool { st, ok := status(t, metrics); return ok && st.Draining })
			forced := time.Now()
			if tc.again {
				w.signal(t, syscall.SIGTERM)
			}
			if code := w.exited(t, 20*time.Second); code != 0 {
				t.Errorf("forced worker exited %d, want 0", code)
			}
			t.Logf("exited %s after the force", time.Since(forced).Round(time.Millisecond))
			if _, err := client.Get(t.Context(), "stuck"); !errors.Is(err, jobs.ErrNotFound) {
				t.Fatalf("forced job has a result: %v", err)
			}
			if logs := w.logs.String(); !strings.Contains(logs, `"verdict":"nak"`) {
				t.Errorf("no nak logged:\n%s", logs)
			}

			rescued := time.Now()
			fakeWorker(t, url, "rescuer", execLog, "--slots", "1")
			testutil.Eventually(t, 10*time.Second, "redelivered at once (lease is 30s)", func() bool { r, _ := executions(t, execLog); return r["stuck"] == 2 })
			t.Logf("redelivered %s after the rescuer started", time.Since(rescued).Round(time.Millisecond))
			res, err := client.Cancel(t.Context(), "stuck")
			if err != nil || res.Status != jobs.StatusCanceled || res.Worker != "rescuer" || res.Attempt != 2 {
				t.Errorf("redelivered job: %v %+v", err, res)
			}
		})
	}
}

// The real executor against a Docker daemon that is not there: Check says
// infrastructure (not a missing image), the worker reports not ready on
// /readyz and /status, and fetches nothing, so no delivery is burnt while
// a job waits.
func TestDeadDockerDaemon(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "docker.sock") // nothing listens here
	cli, err := client.New(client.WithHost("unix://" + sock))
	if err != nil {
		t.Fatal(err)
	}
	e, err := executor.New(executor.Config{Client: cli, WorkerID: "no-docker"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := e.Check(ctx); !errors.Is(err, executor.ErrInfrastructure) || errors.Is(err, executor.ErrImageMissing) {
		t.Fatalf("Check with no daemon: %v, want ErrInfrastructure and not ErrImageMissing", err)
	}

	metrics := testutil.FreeAddr(t)
	s := startServe(t, []string{"--embedded", "--listen", "127.0.0.1:-1", "--data-dir", t.TempDir(), "--metrics", metrics, "--id", "no-docker"},
		&executor.Service{Executor: e})
	defer s.Stop(t)
	// /readyz is 503 from the start (the topology is set up first); the
	// failed ping shows in /status.
	testutil.Eventually(t, 10*time.Second, "/status not ready after a docker ping", func() bool {
		st, ok := status(t, metrics)
		return ok && !st.Ready && strings.Contains(st.LastError, "docker ping")
	})
	if c, _ := httpGet("http://" + metrics + "/readyz"); c != 503 {
		t.Errorf("/readyz = %d, want 503", c)
	}
	if c, _ := httpGet("http://" + metrics + "/healthz"); c != 200 {
		t.Errorf("/healthz = %d: the process is alive", c)
	}
	c := connect(t, s.url)
	if _, err := c.Submit(ctx, &jobs.Job{ID: "waits", Image: "python", Code: "print(1)"}); err != nil {
		t.Fatal(err)
	}
	_, js := natstest.Connect(t, s.url)
	cons, err := js.Consumer(ctx, fleet.StreamName, fleet.ConsumerName("default"))
	if err != nil {
		t.Fatal(err)
	}
	// Several probe rounds (back-off from 250ms) pass without a delivery.
	until := time.Now().Add(3 * time.Second)
	// What counts is that nothing is delivered; the count of pending jobs
	// may read 0 for a moment while the worker (re)creates its consumer.
	testutil.Eventually(t, 10*time.Second, "3s without a delivery", func() bool {
		info, err := cons.Info(ctx)
		if err != nil || info.Delivered.Consumer != 0 || info.NumAckPending != 0 {
			t.Fatalf("consumer while Docker is dead: %+v %v", info, err)
		}
		return time.Now().After(until) && info.NumPending == 1
	})
}

// The embedded server's file store keeps queued jobs across a restart of
// the worker and its server: jobs queued when it stops run after it starts
// again on the same --data-dir.
func TestEmbeddedRestartKeepsQueuedJobs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exec := &fakeexec.Executor{}
	args := []string{"--embedded", "--listen", "127.0.0.1:-1", "--data-dir", dir, "--slots", "1", "--id", "e1"}
	s := startServe(t, args, exec)
	c := connect(t, s.url)
	const n = 5
	for i := range n {
		if _, err := c.Submit(t.Context(), &jobs.Job{ID: fmt.Sprintf("q-%d", i), Image: "python", Code: "sleep 300ms\nprint q"}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "first job running", func() bool { return exec.Running() == 1 })
	s.Stop(t) // drains the job in flight; the rest stay queued
	ran := exec.Total()
	if ran >= n {
		t.Fatalf("all %d jobs ran before the stop", ran)
	}

	s = startServe(t, args, exec)
	defer s.Stop(t)
	c = connect(t, s.url)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range n {
		res, err := c.Wait(ctx, fmt.Sprintf("q-%d", i))
		if err != nil || res.Status != jobs.StatusSucceeded {
			t.Errorf("q-%d: %v %+v", i, err, res)
		}
	}
	t.Logf("%d of %d jobs ran before the restart", ran, n)
	if exec.Total() != n {
		t.Errorf("%d executions, want %d", exec.Total(), n)
	}
}
