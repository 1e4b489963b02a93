package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// The test hook's environment (testhook.go), spelled again here: the tests
// are compiled without the build tag, the binary they run with it.
const (
	hookFakeExecutor    = "SANDFLEET_FAKE_EXECUTOR"
	hookFakeExecutorLog = "SANDFLEET_FAKE_EXECUTOR_LOG"
)

// The released build (no build tags, as make build and the fleet images
// make it) cannot be switched to the fake executor: with
// SANDFLEET_FAKE_EXECUTOR=1 and Docker out of reach, it waits for Docker
// and runs nothing, where the test build, in the same environment, runs
// the same kind of job on the fake at once (the control).
func TestReleasedBuildIgnoresFakeExecutor(t *testing.T) {
	t.Parallel()
	released, hooked := releasedBinary(t), workerBinary(t)
	for bin, want := range map[string]bool{released: false, hooked: true} {
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(data, []byte(hookFakeExecutor)); got != want {
			t.Errorf("%s mentions %s: %v, want %v", filepath.Base(bin), hookFakeExecutor, got, want)
		}
	}

	url, client, _ := natsServer(t)
	env := []string{
		hookFakeExecutor + "=1",
		hookFakeExecutorLog + "=" + filepath.Join(t.TempDir(), "exec.log"),
		"DOCKER_HOST=unix://" + filepath.Join(t.TempDir(), "docker.sock"), // nothing listens here
	}
	args := func(queue string) []string {
		return []string{"--nats", url, "--id", queue, "--queue", queue, "--pool", "0", "--log-format", "json"}
	}
	hookedProc := startBinary(t, hooked, "hooked", args("hooked"), env...)
	releasedProc := startBinary(t, released, "released", args("released"), env...)
	for _, queue := range []string{"hooked", "released"} {
		if _, err := client.Submit(t.Context(), &jobs.Job{ID: "on-" + queue, Queue: queue, Image: "python", Code: "print fake"}); err != nil {
			t.Fatal(err)
		}
	}

	var res *jobs.Result
	testutil.Eventually(t, 20*time.Second, "the test build runs its job on the fake", func() bool {
		res, _ = client.Get(t.Context(), "on-hooked")
		return res != nil
	})
	if res.Status != jobs.StatusSucceeded || res.Stdout != "fake\n" {
		t.Fatalf("test build: %+v, want succeeded with the fake's output", res)
	}
	if !strings.Contains(hookedProc.logs.String(), "TEST HOOK") {
		t.Errorf("the test build did not warn about its hook:\n%s", hookedProc.logs.String())
	}

	var heartbeat jobs.WorkerStatus
	testutil.Eventually(t, 20*time.Second, "the released build reports Docker unreachable", func() bool {
		st, err := client.Status(t.Context())
		if err != nil {
			return false
		}
		for _, w := range st.Workers {
			if w.ID == "released" {
				heartbeat = w
				return !w.Ready && strings.Contains(w.LastError, "docker ping")
			}
		}
		return false
	})
	if _, err := client.Get(t.Context(), "on-released"); !errors.Is(err, jobs.ErrNotFound) {
		t.Errorf("the released build stored a result without Docker (%v); heartbeat %+v", err, heartbeat)
	}
	if queued, err := client.Pending(t.Context(), "on-released"); err != nil || !queued {
		t.Errorf("the released build's job is not queued any more: %v, %v", queued, err)
	}
	if strings.Contains(releasedProc.logs.String(), "TEST HOOK") {
		t.Errorf("the released build switched to the fake:\n%s", releasedProc.logs.String())
	}
}
