package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// The rolling restart of TestBinaryRollingRestart, smaller and on real
// Docker: two workers with warm pools run 60 Python jobs of 0.2-1 s while
// each is stopped in turn, twice over: once forced (a second SIGTERM, so
// a job in flight has its sandbox removed and is handed back), once by a
// short grace running out. Every job has one result, succeeded with its
// own output; none is an error or a dead letter; the attempts add up to
// the consumer's deliveries; and no container of either worker is left.
func TestBinaryRollingRestartDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute or two on real Docker; skipped under -short")
	}
	t.Parallel()
	workertest.Sandbox(t, executor.Config{WorkerID: "probe"}) // Docker and the image answer, or skip
	const n = 60
	url, client, js := natsServer(t)
	dead := subscribe(t, js.Conn(), worker.AdvisorySubject(jobs.DefaultQueue))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	ids := []string{uniqueID("rolla"), uniqueID("rollb")}
	launch := func(i int) *proc {
		return dockerWorker(t, url, ids[i], "--slots", "2", "--pool", "2", "--grace", "500ms", "--ack-wait", "20s")
	}
	workers := []*proc{launch(0), launch(1)}

	rnd := rand.New(rand.NewPCG(7, 60))
	for i := range n {
		id := fmt.Sprintf("rolld-%02d", i)
		code := fmt.Sprintf("import time\ntime.sleep(%.2f)\nprint(%q)", 0.2+rnd.Float64()*0.8, id)
		if _, err := client.Submit(ctx, &jobs.Job{ID: id, Image: "python", Code: code}); err != nil {
			t.Fatal(err)
		}
	}
	stored := func() int { return resultCount(ctx, js) }
	for k := range 4 {
		at := (k + 1) * n / 6
		testutil.Eventually(t, 3*time.Minute, fmt.Sprintf("%d results", at), func() bool { return stored() >= at })
		i := k % 2
		w := workers[i]
		how := "grace over"
		w.signal(t, syscall.SIGTERM)
		if k < 2 {
			how = "forced"
			testutil.Eventually(t, 10*time.Second, "draining logged", func() bool { return strings.Contains(w.logs.String(), `"msg":"draining"`) })
			w.signal(t, syscall.SIGTERM)
		}
		if code := w.exited(t, 60*time.Second); code != 0 {
			t.Errorf("%s exited %d, want 0", ids[i], code)
		}
		t.Logf("restart %d at %d results: %s (%s), %d jobs handed back", k+1, at, ids[i], how, len(handBacks(t, w.logs.String())))
		workers[i] = launch(i)
	}
	testutil.Eventually(t, 3*time.Minute, "all results", func() bool { return stored() >= n })
	for i, w := range workers {
		stopDockerWorker(t, w, ids[i])
	}

	assertResultWrites(t, ctx, js, n)
	attempts, again := 0, []string{}
	for i := range n {
		id := fmt.Sprintf("rolld-%02d", i)
		res := echoed(t, ctx, client, id)
		if res == nil {
			continue
		}
		attempts += res.Attempt
		if res.Attempt > 1 {
			again = append(again, fmt.Sprintf("%s@%d", id, res.Attempt))
		}
	}
	waitJobsDrained(t, ctx, client)
	assertDeliveries(t, ctx, js, attempts)
	if n := pending(t, js.Conn(), dead); n != 0 {
		t.Errorf("%d dead-letter advisories", n)
	}
	t.Logf("rolling restart on Docker: %d jobs, one result each, %d deliveries, re-executed: %s", n, attempts, strings.Join(again, " "))
}
