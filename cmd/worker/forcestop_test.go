package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// nakSubject is where the server announces each nak of the queue's
// consumer: proof that a hand-back reached it.
var nakSubject = server.JSAdvisoryConsumerMsgNakPre + "." + fleet.StreamName + "." + fleet.ConsumerName(jobs.DefaultQueue)

// subscribe subscribes synchronously and flushes, so that nothing published
// after it returns is missed.
func subscribe(t *testing.T, nc *nats.Conn, subject string) *nats.Subscription {
	t.Helper()
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return sub
}

// pending returns how many messages sub holds, after a flush of nc.
func pending(t *testing.T, nc *nats.Conn, sub *nats.Subscription) int {
	t.Helper()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	n, _, err := sub.Pending()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Two forced stops in a row of the worker running the same job
// burnt three deliveries each time (the stopping worker's own pulls took
// the naked job back) and stalled it for the 30 s lease (the last nak was
// lost). Here each stopping worker, with idle slots that wait in pulls,
// runs the job once and hands it back once, and the server has the nak
// (its advisory) when the worker has exited. Round 1 is SIGTERM, then
// SIGTERM once /status says draining, when no pull may be left (the
// consumer's NumWaiting); round 2 is SIGTERM and SIGQUIT back to back. The
// next worker runs the job within seconds though the lease is 30 s; the
// third finishes it: succeeded as attempt 3, three runs, three deliveries
// in the consumer's count, no dead letter.
func TestBinaryForceStopTwice(t *testing.T) {
	t.Parallel()
	url, client, js := natsServer(t)
	nc := js.Conn()
	execLog := filepath.Join(t.TempDir(), "exec.log")
	release := filepath.Join(t.TempDir(), "release")
	naks := subscribe(t, nc, nakSubject)
	dead := subscribe(t, nc, worker.AdvisorySubject(jobs.DefaultQueue))
	if _, err := client.Submit(t.Context(), &jobs.Job{ID: "twice", Image: "python", Code: "waitfile " + release + "\nprint done"}); err != nil {
		t.Fatal(err)
	}
	cons, err := fleet.Topology{}.EnsureConsumer(t.Context(), js, jobs.DefaultQueue)
	if err != nil {
		t.Fatal(err)
	}

	rounds := []struct {
		name string
		stop func(t *testing.T, w *proc, metrics string)
	}{
		{"SIGTERM, SIGTERM once draining", func(t *testing.T, w *proc, metrics string) {
			w.signal(t, syscall.SIGTERM)
			testutil.Eventually(t, 10*time.Second, "draining", func() bool { st, ok := status(t, metrics); return ok && st.Draining })
			info, err := cons.Info(t.Context())
			if err != nil || info.NumWaiting != 0 {
				t.Errorf("pull requests waiting at the server once draining: %v %+v, want none", err, info)
			}
			w.signal(t, syscall.SIGTERM)
		}},
		{"SIGTERM and SIGQUIT back to back", func(t *testing.T, w *proc, _ string) {
			w.signal(t, syscall.SIGTERM)
			w.signal(t, syscall.SIGQUIT)
		}},
	}
	for i, r := range rounds {
		attempt := i + 1
		id := fmt.Sprintf("forced-%d", attempt)
		metrics := testutil.FreeAddr(t)
		started := time.Now()
		w := fakeWorker(t, url, id, execLog, "--slots", "4", "--grace", "1m", "--metrics", metrics)
		testutil.Eventually(t, 10*time.Second, id+" runs the job (a lost hand-back waits out the 30 s lease)", func() bool {
			runs, _ := executions(t, execLog)
			return runs["twice"] == attempt
		})
		t.Logf("%s: running %s after its start", id, time.Since(started).Round(time.Millisecond))
		forced := time.Now()
		r.stop(t, w, metrics)
		if code := w.exited(t, 20*time.Second); code != 0 {
			t.Errorf("%s exited %d, want 0", id, code)
		}
		t.Logf("%s (%s): exited %s after the signals", id, r.name, time.Since(forced).Round(time.Millisecond))
		if n := strings.Count(w.logs.String(), `"verdict":"nak"`); n != 1 {
			t.Errorf("%s logged %d naks, want the job handed back once", id, n)
		}
		m, err := naks.NextMsg(5 * time.Second) // the worker has exited: its nak is at the server
		if err != nil {
			t.Fatalf("%s: no nak reached the server: %v", id, err)
		}
		var nak server.JSConsumerDeliveryNakAdvisory
		if err := json.Unmarshal(m.Data, &nak); err != nil || nak.Deliveries != uint64(attempt) {
			t.Errorf("%s: nak advisory %s, want delivery %d", id, m.Data, attempt)
		}
	}

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fakeWorker(t, url, "finisher", execLog, "--slots", "4")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	res, err := client.Wait(ctx, "twice")
	if err != nil {
		t.Fatalf("no result within 10s (the lease is 30s): %v", err)
	}
	if res.Status != jobs.StatusSucceeded || res.Attempt != 3 || res.Worker != "finisher" || res.Stdout != "done\n" {
		t.Errorf("result %+v, want succeeded as attempt 3 on finisher", res)
	}
	if runs, _ := executions(t, execLog); runs["twice"] != res.Attempt {
		t.Errorf("%d runs for %d attempts", runs["twice"], res.Attempt)
	}
	info, err := cons.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.Delivered.Consumer != uint64(res.Attempt) {
		t.Errorf("the consumer delivered %d times, the result says attempt %d", info.Delivered.Consumer, res.Attempt)
	}
	if n := pending(t, nc, naks); n != 0 {
		t.Errorf("%d more naks", n)
	}
	if n := pending(t, nc, dead); n != 0 {
		t.Errorf("%d dead-letter advisories", n)
	}
}

// handBacks reads a worker's JSON log: job ID → how many times it settled
// the job with a nak.
func handBacks(t *testing.T, logs string) map[string]int {
	t.Helper()
	naks := map[string]int{}
	for line := range strings.Lines(logs) {
		var rec struct {
			Msg     string `json:"msg"`
			JobID   string `json:"job_id"`
			Verdict string `json:"verdict"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "job settled" && rec.Verdict == "nak" {
			naks[rec.JobID]++
		}
	}
	return naks
}

// A rolling restart under load, as a fleet's upgrade makes: 500 jobs of 0.2 to 2 s on three
// workers of 8 slots, submitted a little slower than the fleet runs them
// (so idle slots wait in pulls, as they do in a real fleet), each worker
// restarted in turn, twice over, while the run goes on. Every stop is a
// SIGTERM with a short --grace, made a force by a second signal (once the
// worker says it drains, or SIGQUIT at once), by the grace running out, or
// not at all (a grace longer than any job). The lease
// is the default 30 s, so a delivery lost in a withdrawn pull or a
// hand-back lost at exit would stall a job past the deadline.
//
// Every job gets exactly one result (one write to RESULTS each),
// `succeeded`; no dead letter. Per job: it ran at most once per delivery
// (a force landing between a delivery and its run hands it back unrun,
// counted and printed); every delivery but the last
// ended in a hand-back that a worker logged (attempt - 1 = naks: none was
// lost to a lease running out); no worker handed it back twice (each
// forced stop costs a job in flight one delivery, not three). The attempts
// add up to the consumer's deliveries.
func TestBinaryRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("half a minute of wall time; skipped under -short")
	}
	t.Parallel()
	const n = 500
	url, client, js := natsServer(t)
	nc := js.Conn()
	execLog := filepath.Join(t.TempDir(), "exec.log")
	dead := subscribe(t, nc, worker.AdvisorySubject(jobs.DefaultQueue))
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	type plan struct {
		how   string
		grace string
		stop  func(t *testing.T, w *proc, metrics string)
	}
	sigterm := func(t *testing.T, w *proc, _ string) { w.signal(t, syscall.SIGTERM) }
	plans := []plan{
		{"second signal", "300ms", func(t *testing.T, w *proc, metrics string) {
			w.signal(t, syscall.SIGTERM)
			testutil.Eventually(t, 10*time.Second, "draining", func() bool { st, ok := status(t, metrics); return ok && st.Draining })
			w.signal(t, syscall.SIGTERM)
		}},
		{"SIGTERM and SIGQUIT at once", "300ms", func(t *testing.T, w *proc, _ string) {
			w.signal(t, syscall.SIGTERM)
			w.signal(t, syscall.SIGQUIT)
		}},
		{"grace over", "300ms", sigterm},
		{"drain", "5s", sigterm},
	}
	// Restart k stops worker k%3 with plan planOf(k): each worker meets two
	// kinds of stop.
	const restarts = 6
	planOf := func(k int) plan { return plans[k%len(plans)] }

	type incarnation struct {
		p       *proc
		metrics string
		plan    plan
	}
	names := []string{"roll-a", "roll-b", "roll-c"}
	workers := make([]incarnation, len(names))
	var all []*proc
	launch := func(i int, next plan) incarnation {
		metrics := testutil.FreeAddr(t)
		p := fakeWorker(t, url, names[i], execLog, "--slots", "8", "--grace", next.grace, "--metrics", metrics)
		all = append(all, p)
		return incarnation{p, metrics, next}
	}
	for i := range names {
		workers[i] = launch(i, planOf(i))
	}

	// 24 slots run about 22 jobs of 1.1 s (the mean) a second; 16 a second
	// leaves some waiting in pulls.
	start := time.Now()
	var submitter sync.WaitGroup
	submitErr := make(chan error, 1)
	submitter.Go(func() {
		rnd := rand.New(rand.NewPCG(11, 500))
		tick := time.NewTicker(time.Second / 16)
		defer tick.Stop()
		for i := range n {
			id := fmt.Sprintf("roll-%03d", i)
			code := fmt.Sprintf("sleep %dms\nprint %s", 200+rnd.IntN(1801), id)
			if _, err := client.Submit(ctx, &jobs.Job{ID: id, Image: "python", Code: code}); err != nil {
				submitErr <- fmt.Errorf("submit %s: %w", id, err)
				return
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	})
	defer submitter.Wait()
	stored := func() int {
		select {
		case err := <-submitErr:
			t.Fatal(err)
		default:
		}
		return resultCount(ctx, js)
	}

	for k := range restarts {
		at := (k + 1) * n / 8
		testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("%d results", at), func() bool { return stored() >= at })
		i := k % 3
		w := workers[i]
		signaled := time.Now()
		w.plan.stop(t, w.p, w.metrics)
		if code := w.p.exited(t, 30*time.Second); code != 0 {
			t.Errorf("%s exited %d, want 0", names[i], code)
		}
		t.Logf("restart %d at %d results: %s (%s, --grace %s) exited after %s, %d jobs handed back",
			k+1, at, names[i], w.plan.how, w.plan.grace, time.Since(signaled).Round(time.Millisecond), len(handBacks(t, w.p.logs.String())))
		next := plans[len(plans)-1] // the last incarnations drain at the end
		if k+3 < restarts {
			next = planOf(k + 3)
		}
		workers[i] = launch(i, next)
	}
	testutil.Eventually(t, 2*time.Minute, "all results", func() bool { return stored() >= n })
	elapsed := time.Since(start)
	for i, w := range workers {
		w.p.signal(t, syscall.SIGTERM)
		if code := w.p.exited(t, 30*time.Second); code != 0 {
			t.Errorf("%s exited %d", names[i], code)
		}
	}

	results := assertResultWrites(t, ctx, js, n)
	naks := map[string]int{}
	for _, p := range all {
		for id, k := range handBacks(t, p.logs.String()) {
			if k > 1 {
				t.Errorf("%s handed back %d times by one worker, want once", id, k)
			}
			naks[id] += k
		}
	}
	runs, execs := executions(t, execLog)
	attempts, unrun := 0, 0
	var again []string
	for i := range n {
		id := fmt.Sprintf("roll-%03d", i)
		res := echoed(t, ctx, client, id)
		if res == nil {
			continue
		}
		// A force can land between a delivery and the start of its run
		// (during the look at RESULTS and CANCELS): that delivery is
		// handed back unrun, so runs may be fewer than deliveries, but
		// never more, and every delivery but the last is a hand-back.
		if runs[id] < 1 || runs[id] > res.Attempt || naks[id] != res.Attempt-1 {
			t.Errorf("%s: %d runs and %d hand-backs for %d deliveries, want 1 to %d runs and %d hand-backs", id, runs[id], naks[id], res.Attempt, res.Attempt, res.Attempt-1)
		}
		if runs[id] < res.Attempt {
			unrun++
		}
		attempts += res.Attempt
		if runs[id] > 1 {
			again = append(again, fmt.Sprintf("%s×%d", id, runs[id]))
		}
	}
	waitJobsDrained(t, ctx, client)
	assertDeliveries(t, ctx, js, attempts)
	if n := pending(t, nc, dead); n != 0 {
		t.Errorf("%d dead-letter advisories", n)
	}
	if len(again) == 0 {
		t.Errorf("no job ran twice: no stop landed mid-job")
	}
	t.Logf("rolling restart: %d jobs, %d results (each ID once), %d executions, %d re-executed after a forced stop: %s; %d handed back before they ran; %s",
		n, results, execs, len(again), strings.Join(again, " "), unrun, elapsed.Round(time.Millisecond))
}
