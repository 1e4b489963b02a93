package worker_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// A job queued behind a busy worker is finished as canceled by the worker
// as soon as the cancel request is stored, not when a slot frees: the
// client's CancelWait is far longer than the test, so the result can only
// be the worker's (it names it), and the job never runs.
func TestCancelQueuedFinishedByWorker(t *testing.T) {
	t.Parallel()
	b := setupWith(t, fleet.Topology{AckWait: 2 * time.Second, CancelWait: time.Minute})
	b.startWorker(t, worker.Config{Slots: 1})
	if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "busy", Image: "python", Code: "block"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "busy job running", func() bool { return b.exec.Running() == 1 })
	reply, err := b.nc.SubscribeSync("results.behind")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "behind", Image: "python", Code: "print no",
		ReplyTo: "results.behind", Labels: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	res, err := b.client.Cancel(waitCtx(t), "behind")
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if res.Status != jobs.StatusCanceled || res.Worker != "w1" || res.Attempt != 0 || res.QueuedAt == nil ||
		res.Labels["k"] != "v" || res.Error != fleet.CancelReason {
		t.Errorf("canceled queued job: %+v", res)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("cancel took %s", d)
	}
	if _, err := reply.NextMsg(10 * time.Second); err != nil {
		t.Errorf("no result on reply_to: %v", err)
	}
	// The message is gone from the stream; only the busy job is left.
	if _, err := natstest.Stores(t, b.js).Stream.GetLastMsgForSubject(t.Context(), fleet.Subject("default", "behind")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("canceled job still in the stream: %v", err)
	}
	if b.exec.Runs("behind") != 0 || b.exec.Running() != 1 {
		t.Errorf("runs of behind %d, running %d", b.exec.Runs("behind"), b.exec.Running())
	}

	// The busy job is then canceled where it runs.
	if res, err := b.client.Cancel(waitCtx(t), "busy"); err != nil || res.Status != jobs.StatusCanceled || res.Attempt != 1 {
		t.Errorf("cancel busy: %v %+v", err, res)
	}
	testutil.Eventually(t, 10*time.Second, "stream empty", func() bool {
		info, err := natstest.Stores(t, b.js).Stream.Info(t.Context())
		return err == nil && info.State.Msgs == 0
	})
	if n := b.exec.Runs("behind"); n != 0 {
		t.Errorf("canceled queued job ran %d times", n)
	}
}

// A request stored before the worker started (left by a client that did
// not finish the job itself, as a tenant's cannot), and one stored before
// its job was even submitted, cancel their jobs at delivery: neither
// runs. The worker knows them from its watch of CANCELS.
func TestCancelStoredBeforeDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "early", Image: "python", Code: "print no"}); err != nil {
		t.Fatal(err)
	}
	request := func(id string) {
		t.Helper()
		if _, err := natstest.Stores(t, b.js).Cancels.Put(t.Context(), id, []byte(`{"requested_at":"2026-01-01T00:00:00Z"}`)); err != nil {
			t.Fatal(err)
		}
	}
	request("early")
	b.startWorker(t, worker.Config{Slots: 1})
	res, err := b.client.Wait(waitCtx(t), "early")
	if err != nil || res.Status != jobs.StatusCanceled || b.exec.Runs("early") != 0 {
		t.Fatalf("job with a request from before the worker: %v %+v, runs %d", err, res, b.exec.Runs("early"))
	}
	// The worker is up, its watch past CANCELS's initial values.
	if _, err := b.client.SubmitAndWait(waitCtx(t), &jobs.Job{ID: "plain", Image: "python", Code: "print yes"}); err != nil {
		t.Fatal(err)
	}
	request("later")
	time.Sleep(200 * time.Millisecond) // the watch has it: no job to cancel yet
	if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "later", Image: "python", Code: "print no"}); err != nil {
		t.Fatal(err)
	}
	res, err = b.client.Wait(waitCtx(t), "later")
	if err != nil || res.Status != jobs.StatusCanceled || res.Attempt != 1 || b.exec.Runs("later") != 0 {
		t.Fatalf("job submitted after its request: %v %+v, runs %d", err, res, b.exec.Runs("later"))
	}
}

// One tenant's flood of cancel requests for jobs that run nowhere (a
// hundred thousand keys, as fast as the server takes them) does not delay
// another's cancels: a running job and a queued one whose requests are
// stored right behind the flood are both canceled by the worker while the
// flood's keys are still being handled, well before a generous deadline.
// Before, the worker looked each key up in JOBS (one request per key and
// lane) on the path every cancel waits on: the running job was canceled
// only once the whole flood was through, 5 s for 60,000 keys on 2 lanes
// here, and the test's 300,000 lookups take longer than its deadline.
func TestCancelFloodDoesNotDelayOthersCancels(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		// A smaller flood could not fail: the old lookups fit its deadline.
		t.Skip("stores a flood of 100,000 cancel requests, too long for make check; skipped under -short")
	}
	b := setupWith(t, fleet.Topology{AckWait: 2 * time.Second, CancelWait: time.Minute})
	lanes := []worker.Lane{{Queue: "default", Weight: 3}, {Queue: "batch", Weight: 2}, {Queue: "bulk", Weight: 1}}
	b.startWorker(t, worker.Config{Slots: len(lanes), Queues: lanes})
	for _, l := range lanes {
		if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "busy-" + l.Queue, Queue: l.Queue, Image: "python", Code: "block"}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "every slot busy", func() bool { return b.exec.Running() == len(lanes) })
	if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "behind", Image: "python", Code: "print no"}); err != nil {
		t.Fatal(err)
	}
	watch := func(id string) *jobs.ResultWatch {
		w, err := b.client.Watch(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Stop() })
		return w
	}
	running, queued := watch("busy-default"), watch("behind")

	const flood = 100_000
	start := time.Now()
	for i := range flood {
		if _, err := b.js.PublishAsync("$KV.CANCELS.team-b.f"+strconv.Itoa(i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if i%2000 == 1999 || i == flood-1 {
			select {
			case <-b.js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				t.Fatal("the flood was not stored within a minute")
			}
		}
	}
	stored := time.Since(start)
	for _, id := range []string{"behind", "busy-default"} {
		if _, err := natstest.Stores(t, b.js).Cancels.Put(t.Context(), id, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	asked := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	// The queued job is finished by the lookup, or, when the running
	// job's slot freed first, at its delivery: canceled either way,
	// never run.
	for _, c := range []struct {
		id       string
		w        *jobs.ResultWatch
		attempts []int
	}{{"busy-default", running, []int{1}}, {"behind", queued, []int{0, 1}}} {
		res, err := c.w.Next(ctx)
		if err != nil {
			t.Fatalf("%s was not canceled within 5s of its request, behind %d others' (stored in %s): %v", c.id, flood, stored, err)
		}
		if res.Status != jobs.StatusCanceled || res.Worker != "w1" || !slices.Contains(c.attempts, res.Attempt) {
			t.Fatalf("%s: status %s, worker %s, attempt %d", c.id, res.Status, res.Worker, res.Attempt)
		}
		t.Logf("flood of %d stored in %s; %s canceled %s after its request", flood, stored.Round(time.Millisecond), c.id, time.Since(asked).Round(time.Millisecond))
	}
	if n := b.exec.Runs("behind"); n != 0 {
		t.Errorf("the queued job ran %d times", n)
	}
}
