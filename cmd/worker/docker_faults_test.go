package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// containers lists the IDs of the containers, running or not, with these
// labels (key=value).
func containers(t *testing.T, labels ...string) []string {
	t.Helper()
	return dockerPS(t, "-aq", labels)
}

// dockerWorker starts the binary on real Docker under a fresh worker ID,
// and removes whatever containers carry that ID when the test ends.
func dockerWorker(t *testing.T, url, id string, extra ...string) *proc {
	t.Helper()
	t.Cleanup(func() {
		if ids := containers(t, executor.LabelWorker+"="+id); len(ids) > 0 {
			t.Errorf("containers of %s left: %v", id, ids)
			_ = exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).Run()
		}
	})
	args := append([]string{"--nats", url, "--id", id, "--log-format", "json", "--slots", "1"}, extra...)
	if !slices.Contains(extra, "--config") {
		args = append(args, "--config", defaultImageOnly(t))
	}
	return startProc(t, id, args)
}

// defaultImageOnly writes a worker config of the default presets that use
// the default image, and returns its path: the worker then keeps one pool,
// whether or not this machine has the languages' image (make test builds
// it), and the tests' counts of containers hold either way.
func defaultImageOnly(t *testing.T) string {
	t.Helper()
	presets := map[string]executor.Preset{}
	for name, p := range executor.DefaultPresets() {
		if p.Image == executor.DefaultImage {
			presets[name] = p
		}
	}
	return writeConfig(t, presets)
}

// sandboxRunning reports whether worker id's sandbox runs job: a fresh
// container with the job's label is up, or the job was handed to a warm
// one (whose labels predate the job).
func sandboxRunning(t *testing.T, w *proc, id, job string) bool {
	if strings.Contains(w.logs.String(), `"msg":"handed a warm sandbox"`) {
		return true
	}
	out, _ := exec.Command("docker", "ps", "-q", "--filter", "status=running",
		"--filter", "label="+executor.LabelWorker+"="+id, "--filter", "label="+executor.LabelJob+"="+job).Output()
	return len(strings.Fields(string(out))) > 0
}

func uniqueID(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), time.Now().UnixNano()%1e9)
}

// SIGKILL of the worker mid-job, on real Docker: the sandbox outlives the
// worker. The worker restarted under the same ID reaps it before it runs
// anything (and logs so); the job is redelivered when its lease (2s)
// expires and completes on the restarted worker; exactly one result.
func TestBinaryCrashDocker(t *testing.T) {
	t.Parallel()
	workertest.Sandbox(t, executor.Config{WorkerID: "probe"}) // Docker and the image answer, or skip
	url, client, js := natsServer(t)
	id := uniqueID("crash")
	args := []string{"--ack-wait", "2s", "--log-level", "debug"}
	w := dockerWorker(t, url, id, args...)

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	rw, err := client.Watch(ctx, "crashme")
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Stop()
	if _, err := client.Submit(ctx, &jobs.Job{ID: "crashme", Image: "python", Code: "import time\ntime.sleep(5)\nprint('survived')"}); err != nil {
		t.Fatal(err)
	}
	// The job sleeps 5s: killed once its sandbox runs, it dies mid-job.
	testutil.Eventually(t, 60*time.Second, "sandbox running the job", func() bool { return sandboxRunning(t, w, id, "crashme") })
	w.kill()
	killed := time.Now()
	orphans := containers(t, executor.LabelWorker+"="+id)
	if len(orphans) == 0 {
		t.Fatalf("after SIGKILL, no containers of %s are left: nothing to reap", id)
	}

	w = dockerWorker(t, url, id, args...)
	res, err := rw.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("result %s attempt %d, started %s after the kill", res.Status, res.Attempt, res.StartedAt.Sub(killed).Round(time.Millisecond))
	if res.Status != jobs.StatusSucceeded || res.Stdout != "survived\n" || res.Attempt != 2 || res.Worker != id {
		t.Errorf("result after the crash: %+v", res)
	}
	if logs := w.logs.String(); !strings.Contains(logs, `"msg":"reaped a leftover sandbox"`) {
		t.Errorf("the restarted worker did not log reaping:\n%s", logs)
	}
	for _, c := range orphans {
		if err := exec.Command("docker", "inspect", c).Run(); err == nil {
			t.Errorf("orphan %s of the killed worker still exists", c)
		}
	}
	kv, err := js.Stream(ctx, "KV_"+fleet.ResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := kv.Info(ctx); err != nil || info.State.LastSeq != 1 {
		t.Errorf("RESULTS writes: %+v %v, want exactly 1", info.State, err)
	}
	stopDockerWorker(t, w, id)
}

// Drain then force on real Docker: the second SIGTERM stops the sandbox,
// removes it and naks the job, and the worker exits; no result is stored
// and the job is queued for another worker.
func TestBinaryForceDocker(t *testing.T) {
	t.Parallel()
	workertest.Sandbox(t, executor.Config{WorkerID: "probe"}) // Docker and the image answer, or skip
	url, client, _ := natsServer(t)
	id := uniqueID("force")
	w := dockerWorker(t, url, id, "--ack-wait", "30s", "--grace", "1m", "--log-level", "debug")
	if _, err := client.Submit(t.Context(), &jobs.Job{ID: "sleeper", Image: "python", Code: "import time\ntime.sleep(120)"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "sandbox running the job", func() bool { return sandboxRunning(t, w, id, "sleeper") })
	w.signal(t, syscall.SIGTERM)
	testutil.Eventually(t, 10*time.Second, "draining logged", func() bool { return strings.Contains(w.logs.String(), `"msg":"draining"`) })
	forced := time.Now()
	w.signal(t, syscall.SIGTERM)
	if code := w.exited(t, 20*time.Second); code != 0 {
		t.Errorf("forced worker exited %d", code)
	}
	t.Logf("exited %s after the second signal", time.Since(forced).Round(time.Millisecond))
	testutil.Eventually(t, 30*time.Second, "sandboxes removed", func() bool { return len(containers(t, executor.LabelWorker+"="+id)) == 0 })
	if _, err := client.Get(t.Context(), "sleeper"); !errors.Is(err, jobs.ErrNotFound) {
		t.Errorf("forced job has a result: %v", err)
	}
	if q, err := client.Pending(t.Context(), "sleeper"); !q || err != nil {
		t.Errorf("forced job not queued: %v %v", q, err)
	}
	if logs := w.logs.String(); !strings.Contains(logs, `"verdict":"nak"`) {
		t.Errorf("no nak logged:\n%s", logs)
	}
}

// Cancel of a running job on real Docker: `submit cancel` reaches the
// worker through the CANCELS bucket, the sandbox is killed and removed, and
// the stored result is canceled with the worker's own figures. The test
// logs how long the kill took; it asserts no duration.
func TestBinaryCancelDocker(t *testing.T) {
	t.Parallel()
	workertest.Sandbox(t, executor.Config{WorkerID: "probe"}) // Docker and the image answer, or skip
	url, client, _ := natsServer(t)
	id := uniqueID("cancel")
	// Debug logs say when a warm sandbox took the job (see sandboxRunning):
	// the worker is ready only once one started, so the job always finds it.
	w := dockerWorker(t, url, id, "--log-level", "debug")
	if _, err := client.Submit(t.Context(), &jobs.Job{ID: "runaway", Image: "python", Code: "import time\ntime.sleep(120)"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "sandbox running the job", func() bool { return sandboxRunning(t, w, id, "runaway") })
	asked := time.Now()
	res, err := client.Cancel(t.Context(), "runaway")
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	t.Logf("canceled result %s %.0fs after the request", res.Status, time.Since(asked).Seconds())
	if res.Status != jobs.StatusCanceled || res.Worker != id || res.StartedAt == nil {
		t.Errorf("result after cancel: %+v, want canceled by %s after it started", res, id)
	}
	testutil.Eventually(t, 30*time.Second, "sandbox removed", func() bool { return len(containers(t, executor.LabelJob+"=runaway", executor.LabelWorker+"="+id)) == 0 })
	t.Logf("sandbox gone %s after the request", time.Since(asked).Round(time.Millisecond))

	// The worker goes on serving.
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	next, err := client.SubmitAndWait(ctx, &jobs.Job{ID: "after-cancel", Image: "python", Code: "print('next')"})
	if err != nil || next.Status != jobs.StatusSucceeded || next.Stdout != "next\n" {
		t.Errorf("job after the cancel: %v %+v", err, next)
	}
	w.signal(t, syscall.SIGTERM)
	if code := w.exited(t, 30*time.Second); code != 0 {
		t.Errorf("worker exited %d", code)
	}
}
