package worker_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/jobindex"
	"github.com/sandfleet/sandfleet/internal/natsembed"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// A job whose every delivery fails for a reason that is not its own (the
// executor's infrastructure fails for it alone) is handed back until its
// deliveries run out. The server's MAX_DELIVERIES advisory makes a worker
// store a final error result naming the attempts, remove the message and
// publish to reply_to; a client waiting on the job is released.
func TestDeadLetterAfterMaxDeliver(t *testing.T) {
	t.Parallel()
	b := setupWith(t, fleet.Topology{AckWait: 2 * time.Second, MaxDeliver: 3})
	obs := &recorder{}
	b.startWorker(t, worker.Config{Slots: 2, HoldMax: 100 * time.Millisecond, Observer: obs})

	replies, err := b.nc.SubscribeSync("replies.doomed")
	if err != nil {
		t.Fatal(err)
	}
	rw, err := b.client.Watch(t.Context(), "doomed")
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Stop()
	if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "doomed", Image: "python", Code: "infra", ReplyTo: "replies.doomed", Labels: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	res, err := rw.Next(waitCtx(t)) // the waiting client is released
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != jobs.StatusError || res.ExitCode() != 125 || res.Attempt != 3 ||
		!strings.Contains(res.Error, "gave up after 3 deliveries") || res.Labels["k"] != "v" || res.QueuedAt == nil {
		t.Errorf("dead letter result: %+v", res)
	}
	msg, err := replies.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal("no result on reply_to:", err)
	}
	if onReply, err := jobs.DecodeResult(msg.Data); err != nil || onReply.Status != jobs.StatusError || onReply.Error != res.Error {
		t.Errorf("reply_to got %s (%v)", msg.Data, err)
	}
	testutil.Eventually(t, 10*time.Second, "dead letter removed from the stream", func() bool {
		info, err := natstest.Stores(t, b.js).Stream.Info(t.Context())
		return err == nil && info.State.Msgs == 0
	})
	if q, err := b.client.Pending(t.Context(), "doomed"); q || err != nil {
		t.Errorf("Pending(doomed) = %v, %v after the dead letter", q, err)
	}
	// The index lists it as a dead letter.
	idx, err := jobindex.Open(t.Context(), b.js)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the dead letter in the index", func() bool {
		dead, n, err := idx.DeadLetters(t.Context(), 10)
		return err == nil && n == 1 && dead[0].ID == "doomed" && dead[0].Status == jobs.StatusError && dead[0].DeadLetter
	})
	// The worker is not wedged by it.
	if res, err := b.client.SubmitAndWait(waitCtx(t), &jobs.Job{ID: "next", Image: "python", Code: "print ok"}); err != nil || res.Status != jobs.StatusSucceeded {
		t.Errorf("next job: %v %+v", err, res)
	}
	// The observer (metrics) saw three deliveries of the doomed job, two
	// of them redeliveries, one dead letter, and each outcome once.
	// (A client may see the stored result before the observer is told.)
	testutil.Eventually(t, 10*time.Second, "next job observed", func() bool { _, f, _ := obs.snapshot(); return f["next"] != "" })
	attempts, finished, dead := obs.snapshot()
	if want := []int{1, 2, 3, 1}; !slices.Equal(attempts, want) || dead != 1 ||
		finished["doomed"] != "error/python" || finished["next"] != "succeeded/python" || len(finished) != 2 {
		t.Errorf("observer: attempts %v (want %v), dead letters %d, finished %v", attempts, want, dead, finished)
	}
}

// With WorkQueue retention a message given up after MaxDeliver stays in
// the stream forever. Here it is given up while no worker runs (two
// "workers" take it and die without acking, as a SIGKILLed one would), so
// the advisory reaches nobody: the message sits in limbo, delivered to no
// one and with no result. A worker started later finds it in its sweep.
func TestDeadLetterSweepFindsMissedAdvisory(t *testing.T) {
	t.Parallel()
	b := setupWith(t, fleet.Topology{AckWait: time.Second, MaxDeliver: 2})
	cons, err := b.topo.EnsureConsumer(t.Context(), b.js, "default")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "limbo", Image: "python", Code: "print never"}); err != nil {
		t.Fatal(err)
	}
	for want := 1; want <= 2; want++ {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var got []jetstream.Msg
		for m := range batch.Messages() {
			got = append(got, m)
		}
		if len(got) != 1 {
			t.Fatalf("delivery %d: got %d messages", want, len(got))
		}
		if md, _ := got[0].Metadata(); md == nil || int(md.NumDelivered) != want {
			t.Fatalf("delivery %d: metadata %+v", want, md)
		}
		// Not acked: the "worker" died.
	}
	// A pull after the last lease expired makes the server give the job up.
	testutil.Eventually(t, 15*time.Second, "server gives the job up", func() bool {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			return false
		}
		for range batch.Messages() {
			t.Fatal("delivered after MaxDeliver")
		}
		info, err := cons.Info(t.Context())
		return err == nil && info.NumAckPending == 0
	})
	if q, err := b.client.Pending(t.Context(), "limbo"); !q || err != nil {
		t.Fatalf("the given-up message is not in the stream: %v %v", q, err)
	}
	if _, err := b.client.Get(t.Context(), "limbo"); err == nil {
		t.Fatal("a result exists before any worker ran")
	}

	b.startWorker(t, worker.Config{SweepInterval: 200 * time.Millisecond})
	res, err := b.client.Wait(waitCtx(t), "limbo")
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != jobs.StatusError || res.Attempt != 2 || !strings.Contains(res.Error, "gave up after 2 deliveries") {
		t.Errorf("swept result: %+v", res)
	}
	testutil.Eventually(t, 10*time.Second, "limbo message removed", func() bool {
		q, err := b.client.Pending(t.Context(), "limbo")
		return err == nil && !q
	})
	if n := b.exec.Runs("limbo"); n != 0 {
		t.Errorf("given-up job ran %d times", n)
	}
}

// A dead letter whose job already has a result (its last worker stored it,
// then died before acking; or it was canceled) keeps that result: the
// finalizing is first-writer-wins like every result write.
func TestDeadLetterKeepsStoredResult(t *testing.T) {
	t.Parallel()
	b := setupWith(t, fleet.Topology{AckWait: time.Second, MaxDeliver: 1})
	cons, err := b.topo.EnsureConsumer(t.Context(), b.js, "default")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "done-then-died", Image: "python", Code: "print x"}); err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for range batch.Messages() {
	}
	now := time.Now().UTC()
	zero := 0
	if _, _, err := records.StoreResult(t.Context(), natstest.Stores(t, b.js).Results,
		&jobs.Result{ID: "done-then-died", Status: jobs.StatusSucceeded, Exit: &zero, Stdout: "x\n", Worker: "dead", Attempt: 1, FinishedAt: &now}, 0); err != nil {
		t.Fatal(err)
	}
	// Not acked. The worker's first pull after the lease makes the server
	// give up, and the worker gets the advisory.
	b.startWorker(t, worker.Config{})
	testutil.Eventually(t, 15*time.Second, "message removed", func() bool {
		q, err := b.client.Pending(t.Context(), "done-then-died")
		return err == nil && !q
	})
	res, err := b.client.Get(t.Context(), "done-then-died")
	if err != nil || res.Status != jobs.StatusSucceeded || res.Worker != "dead" {
		t.Errorf("stored result replaced: %v %+v", err, res)
	}
}

// While the executor is down the heartbeat in WORKERS says Ready=false
// with the error, and Ready=true again once it is back.
func TestInfrastructureDownHeartbeat(t *testing.T) {
	t.Parallel()
	b := setupWith(t, fleet.Topology{AckWait: 2 * time.Second, WorkerTTL: time.Second})
	b.exec.SetDown(true)
	b.startWorker(t, worker.Config{ID: "sick"})
	kv := natstest.Stores(t, b.js).Workers
	beat := func() jobs.WorkerStatus {
		var st jobs.WorkerStatus
		if e, err := kv.Get(t.Context(), "sick"); err == nil {
			_ = json.Unmarshal(e.Value(), &st)
		}
		return st
	}
	testutil.Eventually(t, 10*time.Second, "heartbeat says not ready", func() bool {
		st := beat()
		return st.ID == "sick" && !st.Ready && strings.Contains(st.LastError, fakeexec.ErrDown.Error())
	})
	b.exec.SetDown(false)
	testutil.Eventually(t, 10*time.Second, "heartbeat says ready", func() bool {
		st := beat()
		return st.Ready && st.LastError == ""
	})
}

// The NATS server stops while jobs run and comes back on the same port and
// store. The jobs in flight finish while it is away, so their result writes
// fail and are retried after the reconnect; the jobs still queued survive
// in the file store. Every job gets exactly one result.
func TestBrokerRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	listen := testutil.FreeAddr(t)
	start := func() *server.Server {
		t.Helper()
		var srv *server.Server
		// The port may take a moment to be free again after a shutdown.
		testutil.Eventually(t, 10*time.Second, "server listening on "+listen, func() bool {
			var err error
			srv, err = natsembed.Start(natsembed.Options{Listen: listen, StoreDir: dir})
			return err == nil
		})
		return srv
	}
	srv := start()
	var srvMu sync.Mutex
	t.Cleanup(func() {
		srvMu.Lock()
		defer srvMu.Unlock()
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	connect := func() jetstream.JetStream {
		_, js := natstest.Connect(t, "nats://"+listen, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		return js
	}
	topo := fleet.Topology{AckWait: 2 * time.Second}
	client := openClient(t, connect(), topo)
	b := &bundle{js: connect(), client: client, exec: &fakeexec.Executor{}, topo: topo}
	b.startWorker(t, worker.Config{Slots: 4})

	const n = 24
	for i := range n {
		if _, err := client.Submit(t.Context(), &jobs.Job{ID: fmt.Sprintf("br-%02d", i), Image: "python", Code: fmt.Sprintf("sleep 300ms\nprint %d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "jobs running", func() bool { return b.exec.Running() == 4 })
	total := b.exec.Total()
	srvMu.Lock()
	srv.Shutdown()
	srv.WaitForShutdown()
	srvMu.Unlock()
	// Every job in flight finishes with the broker gone.
	testutil.Eventually(t, 10*time.Second, "jobs in flight finished during the outage", func() bool { return b.exec.Running() == 0 })
	if b.exec.Total() != total {
		t.Errorf("a job started during the outage")
	}
	srvMu.Lock()
	srv = start()
	srvMu.Unlock()

	ctx := waitCtx(t)
	for i := range n {
		id := fmt.Sprintf("br-%02d", i)
		var res *jobs.Result
		testutil.Eventually(t, 30*time.Second, "result of "+id, func() bool {
			r, err := client.Get(ctx, id)
			res = r
			return err == nil
		})
		if res.Status != jobs.StatusSucceeded || res.Stdout != fmt.Sprintf("%d\n", i) {
			t.Errorf("%s: %+v", id, res)
		}
	}
	testutil.Eventually(t, 15*time.Second, "stream empty", func() bool {
		info, err := natstest.Stores(t, b.js).Stream.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
	t.Logf("%d jobs, %d executions, %d finished during the outage", n, b.exec.Total(), total)
}
