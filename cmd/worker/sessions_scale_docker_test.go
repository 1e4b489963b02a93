package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// Fifty idle sessions on one worker beside its job queue: jobs still
// flow (a separate capacity), every session still answers after them,
// and the memory an idle session costs is measured: its container's
// cgroup, and the worker process's heap.
func TestFiftyIdleSessionsDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 50 sandboxes")
	}
	const n = 50
	workerID := fmt.Sprintf("sess-50-%d", os.Getpid())
	exec := pythonSandbox(t, workerID)
	s := startServe(t, []string{"--embedded", "--listen", "127.0.0.1:-1", "--data-dir", t.TempDir(), "--id", "s50",
		"--http", "", "--slots", "2", "--pool", "0", "--sessions", strconv.Itoa(n)}, &executor.Service{Executor: exec})
	defer s.Stop(t)
	_, js := natstest.Connect(t, s.url)
	client, err := sessions.NewClient(t.Context(), js, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	ids := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			testutil.Eventually(t, 2*time.Minute, "a session created", func() bool {
				info, err := client.Create(ctx, sessions.Spec{IdleTimeout: 600_000_000_000})
				if err == nil {
					ids[i] = info.ID
				}
				return err == nil
			})
		})
	}
	wg.Wait()
	t.Logf("%d sessions created in %s", n, time.Since(start).Round(time.Millisecond))
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)

	// Jobs flow beside them.
	jc := connect(t, s.url)
	for i := range 10 {
		res, err := jc.SubmitAndWait(ctx, &jobs.Job{Image: "python", Code: fmt.Sprintf("print(%d * 2)", i)})
		if err != nil || res.Status != jobs.StatusSucceeded || res.Stdout != fmt.Sprintf("%d\n", i*2) {
			t.Fatalf("job %d beside %d sessions: %+v %v", i, n, res, err)
		}
	}
	// Each session answers, and its container's memory is read.
	var mem int64
	for _, id := range ids {
		r, err := client.Exec(ctx, id, "", sessionapi.ExecRequest{Cmd: []string{"true"}})
		if err != nil || r.ExitCode == nil || *r.ExitCode != 0 {
			t.Fatalf("session %s after the jobs: %+v %v", id, r, err)
		}
	}
	for _, c := range running(t, executor.LabelWorker+"="+workerID) {
		b, err := os.ReadFile("/sys/fs/cgroup/memory/docker/" + c + "/memory.usage_in_bytes")
		if err != nil { // cgroup v2 or another driver: no figure
			continue
		}
		v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		mem += v
	}
	heap := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("per idle session: %.1f MiB in its container's cgroup (%d sandboxes), %.0f KiB of the worker's heap",
		float64(mem)/n/(1<<20), n, float64(heap)/n/1024)
	for _, id := range ids {
		_, _ = client.Delete(context.Background(), id)
	}
}
