package compose

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// A tenant cannot publish into another's reply subjects, but a JetStream
// push consumer of its own delivers to the subject its creator names,
// which the server does not check against the creator's permissions: B
// has a forged result of its own (its workspace head) delivered to A's
// reply subject. What A's listener can tell, and jobs.DecodeReply checks,
// is that the delivery is no worker's reply: it keeps its stream's
// subject and a JetStream ack subject. The worker's reply to A's job on
// the same subject passes.
func TestTenantPushDeliveryIsNoReply(t *testing.T) {
	s := startTenantServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wrk := connect(t, s, "worker", testWorkerPassword)
	w := workertest.Start(t, wrk.js, &fakeexec.Executor{}, worker.Config{ID: "replies", Slots: 1, Topology: fleet.Topology{AckWait: 5 * time.Second}})
	testutil.Eventually(t, 30*time.Second, "the worker's topology", w.Ready)
	a, clientA := tenantConn(t, s, "team-a")
	b, _ := tenantConn(t, s, "team-b")
	const replyTo = "results.team-a.build"
	sub, err := a.nc.SubscribeSync(replyTo)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	forged := `{"id":"team-a.build","status":"succeeded","exit_code":0,"stdout":"forged by team-b\n"}`
	if _, err := b.js.Publish(ctx, "$KV.WORKSPACES.team-b.x", []byte(forged)); err != nil {
		t.Fatalf("b writes its own head: %v", err)
	}
	req, _ := json.Marshal(map[string]any{"stream_name": "KV_WORKSPACES", "config": map[string]any{
		"name": "x", "filter_subject": "$KV.WORKSPACES.team-b.x",
		"deliver_subject": replyTo, "ack_policy": "none", "deliver_policy": "last_per_subject"}})
	if _, err := b.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE.KV_WORKSPACES.x.$KV.WORKSPACES.team-b.x", req); err != nil {
		t.Fatalf("b creates a push consumer: %v", err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("the push delivery did not come (the server now checks it? then this test's premise is gone): %v", err)
	}
	if res, err := jobs.DecodeReply(m, replyTo); !errors.Is(err, jobs.ErrNotReply) {
		t.Errorf("b's push delivery on %s (reply %q) taken as a reply: %+v, %v", m.Subject, m.Reply, res, err)
	}

	if _, err := clientA.Submit(ctx, &jobs.Job{ID: "build", Image: "python", Code: "print built", ReplyTo: replyTo}); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("the worker's reply: %v", err)
		}
		res, err := jobs.DecodeReply(m, replyTo)
		if errors.Is(err, jobs.ErrNotReply) {
			continue // another push delivery of b's
		}
		if err != nil || res.ID != "team-a.build" || res.Stdout != "built\n" {
			t.Errorf("the worker's reply: %+v, %v", res, err)
		}
		break
	}
}

// A tenant's result wait listens on its result's key subject, where the
// same push-consumer trick delivers too: b has its own forged result
// delivered onto $KV.RESULTS.team-a.<id>. The wait takes a delivery only
// as a wake-up and reads the value from RESULTS, so a waits on, and gets
// the worker's result, never b's.
func TestTenantPushDeliveryForgesNoResult(t *testing.T) {
	s := startTenantServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wrk := connect(t, s, "worker", testWorkerPassword)
	exec := &fakeexec.Executor{}
	w := workertest.Start(t, wrk.js, exec, worker.Config{ID: "forged", Slots: 1, Topology: fleet.Topology{AckWait: 5 * time.Second}})
	testutil.Eventually(t, 30*time.Second, "the worker's topology", w.Ready)
	a, clientA := tenantConn(t, s, "team-a")
	b, _ := tenantConn(t, s, "team-b")

	rw, err := clientA.Watch(ctx, "team-a.build")
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Stop()
	// What the wait's subscription gets, seen by one beside it.
	raw, err := a.nc.SubscribeSync("$KV.RESULTS.team-a.build")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	forged := `{"id":"team-a.build","status":"succeeded","exit_code":0,"stdout":"forged by team-b\n"}`
	if _, err := b.js.Publish(ctx, "$KV.WORKSPACES.team-b.x", []byte(forged)); err != nil {
		t.Fatalf("b writes its own head: %v", err)
	}
	req, _ := json.Marshal(map[string]any{"stream_name": "KV_WORKSPACES", "config": map[string]any{
		"name": "x", "filter_subject": "$KV.WORKSPACES.team-b.x",
		"deliver_subject": "$KV.RESULTS.team-a.build", "ack_policy": "none", "deliver_policy": "last_per_subject"}})
	if _, err := b.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE.KV_WORKSPACES.x.$KV.WORKSPACES.team-b.x", req); err != nil {
		t.Fatalf("b creates a push consumer: %v", err)
	}
	if m, err := raw.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("the push delivery did not come (the server now checks it? then this test's premise is gone): %v", err)
	} else if !strings.Contains(string(m.Data), "forged by team-b") {
		t.Fatalf("delivered %q", m.Data)
	}
	wctx, done := context.WithTimeout(ctx, 2*time.Second)
	res, err := rw.Next(wctx)
	done()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a's wait before its job ran: %+v, %v; want it still waiting", res, err)
	}

	if _, err := clientA.Submit(ctx, &jobs.Job{ID: "build", Image: "python", Code: "print built"}); err != nil {
		t.Fatal(err)
	}
	if res, err = rw.Next(ctx); err != nil || res.Stdout != "built\n" {
		t.Fatalf("a's wait: %+v, %v; want the worker's result", res, err)
	}
}
