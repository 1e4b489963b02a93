package compose

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// TestTenantEvents proves, on a server started from the nats.conf
// tenants.sh writes, that a tenant follows its own jobs' live output and
// nothing of another's: a follows its job from the start, while it runs,
// to its result, refused nothing; b cannot create a consumer on a's
// events (by any filter, or none), read a's last event, read the stream's
// info or messages, or listen on a's events.
func TestTenantEvents(t *testing.T) {
	s := startTenantServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wrk := connect(t, s, "worker", testWorkerPassword)
	topo := fleet.Topology{AckWait: 5 * time.Second}
	exec := &fakeexec.Executor{}
	w := workertest.Start(t, wrk.js, exec, worker.Config{ID: "shared", Slots: 2, Topology: topo, FetchWait: 200 * time.Millisecond})
	testutil.Eventually(t, 30*time.Second, "the worker's topology", w.Ready)
	a, clientA := tenantConn(t, s, "team-a")
	b, clientB := tenantConn(t, s, "team-b")

	id, err := clientA.Submit(ctx, &jobs.Job{ID: "live", Image: "python", Code: "print one\nsleep 300ms\neprint two\nexit 3"})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	var stdout, stderr string
	var res *jobs.Result
	for ev, err := range clientA.Follow(ctx, id) {
		if err != nil {
			t.Fatalf("a follows its job: %v (after %v)", err, types)
		}
		types = append(types, string(ev.Type))
		switch {
		case ev.Type == jobs.EventOutput && ev.Stream == jobs.Stdout:
			stdout += string(ev.DataBytes())
		case ev.Type == jobs.EventOutput:
			stderr += string(ev.DataBytes())
		}
		res = ev.Result
	}
	if got := strings.Join(types, " "); got != "queued started output output finished" || stdout != "one\n" || stderr != "two\n" ||
		res == nil || res.Status != jobs.StatusFailed || res.ExitCode() != 3 {
		t.Fatalf("a followed %q, stdout %q, stderr %q, result %+v", got, stdout, stderr, res)
	}
	// Again, after the end, with ReplayOnly.
	n := 0
	for ev, err := range clientA.Follow(ctx, id, jobs.ReplayOnly()) {
		if err != nil {
			t.Fatalf("a replays its job: %v", err)
		}
		n++
		res = ev.Result
	}
	if n != 5 || res == nil || res.Status != jobs.StatusFailed {
		t.Fatalf("a replayed %d events, result %+v", n, res)
	}
	a.noViolation(t)
	wrk.noViolation(t)

	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 700*time.Millisecond) }
	request := func(subject string, body []byte) {
		t.Helper()
		cctx, done := short()
		defer done()
		if m, err := b.nc.RequestWithContext(cctx, subject, body); err == nil {
			t.Errorf("%s answered: %q", subject, m.Data)
		}
		b.expectViolation(t, subject)
	}

	t.Run("b cannot follow a's job", func(t *testing.T) {
		for _, err := range clientB.Follow(ctx, id) {
			if !errors.Is(err, jobs.ErrNotFound) {
				t.Errorf("b's client following a's job: %v, want not found", err)
			}
		}
		for _, filter := range []string{fleet.EventSubject(id), "events.team-a.*", "events.*.*", "events.>"} {
			cctx, done := short()
			_, err := b.js.CreateConsumer(cctx, fleet.EventsStreamName, jetstream.ConsumerConfig{Name: "peek", FilterSubject: filter})
			done()
			if err == nil {
				t.Errorf("b made a consumer on %s", filter)
			}
			b.expectViolation(t, "$JS.API.CONSUMER.CREATE.EVENTS.peek."+filter)
		}
		// Nor on the stream of a's own, which holds a's events.
		for _, filter := range []string{fleet.EventSubject(id), "events.team-a.*", "events.>"} {
			cctx, done := short()
			_, err := b.js.CreateConsumer(cctx, fleet.EventsStreamOf("team-a"), jetstream.ConsumerConfig{Name: "peek", FilterSubject: filter})
			done()
			if err == nil {
				t.Errorf("b made a consumer on %s of %s", filter, fleet.EventsStreamOf("team-a"))
			}
			b.expectViolation(t, "$JS.API.CONSUMER.CREATE.EVENTS_team-a.peek."+filter)
		}
		request("$JS.API.CONSUMER.CREATE.EVENTS_team-a", []byte(`{"stream_name":"EVENTS_team-a","config":{"ack_policy":"none"}}`))
		request("$JS.API.CONSUMER.CREATE.EVENTS", []byte(`{"stream_name":"EVENTS","config":{"ack_policy":"none"}}`))
		request("$JS.API.CONSUMER.CREATE.EVENTS.peek", []byte(`{"stream_name":"EVENTS","config":{"name":"peek","ack_policy":"none"}}`))
		request("$JS.API.CONSUMER.DURABLE.CREATE.EVENTS.peek", []byte(`{"stream_name":"EVENTS","config":{"durable_name":"peek","ack_policy":"none"}}`))
		// A subject naming b's jobs and a body naming a's, on b's own
		// stream (made for b's first job): the server refuses the mismatch.
		if res, err := clientB.SubmitAndWait(ctx, &jobs.Job{ID: "first", Image: "python", Code: "print b"}); err != nil || res.Status != jobs.StatusSucceeded {
			t.Fatalf("b's first job: %v %+v", err, res)
		}
		cctx, done := short()
		defer done()
		m, err := b.nc.RequestWithContext(cctx, "$JS.API.CONSUMER.CREATE.EVENTS_team-b.peek.events.team-b.*",
			[]byte(`{"stream_name":"EVENTS_team-b","config":{"name":"peek","filter_subjects":["events.team-a.*"],"ack_policy":"none"}}`))
		if err != nil || !strings.Contains(string(m.Data), `"error"`) {
			t.Errorf("a consumer filtered to b's jobs by its subject and to a's by its body: %v %s", err, m.Data)
		}
	})

	t.Run("b cannot read a's events", func(t *testing.T) {
		request("$JS.API.DIRECT.GET.EVENTS.events."+id, nil)
		request("$JS.API.DIRECT.GET.EVENTS_team-a.events."+id, nil)
		request("$JS.API.STREAM.INFO.EVENTS_team-a", nil)
		request("$JS.API.DIRECT.GET.EVENTS", []byte(`{"last_by_subj":"events.`+id+`"}`))
		request("$JS.API.STREAM.MSG.GET.EVENTS", []byte(`{"last_by_subj":"events.`+id+`"}`))
		request("$JS.API.STREAM.INFO.EVENTS", []byte(`{"subjects_filter":"events.>"}`))
		request("$JS.API.CONSUMER.LIST.EVENTS", nil)
		request("$JS.API.CONSUMER.NAMES.EVENTS", nil)
		for _, subj := range []string{"events.team-a.>", "events.>"} {
			sub, err := b.nc.SubscribeSync(subj)
			if err != nil {
				t.Fatal(err)
			}
			b.expectSubViolation(t, subj)
			sub.Unsubscribe()
		}
	})

	t.Run("b cannot forge a's events", func(t *testing.T) {
		forged, _ := records.MarshalEvent(&jobs.Event{Type: jobs.EventOutput, ID: id, Attempt: 1, Data: "forged\n"})
		cctx, done := short()
		defer done()
		if _, err := b.js.Publish(cctx, fleet.EventSubject(id), forged); err == nil {
			t.Fatal("b stored an event of a's job")
		}
		b.expectViolation(t, fleet.EventSubject(id))
	})

	t.Run("b follows its own", func(t *testing.T) {
		idB, err := clientB.Submit(ctx, &jobs.Job{ID: "live", Image: "python", Code: "print b"})
		if err != nil {
			t.Fatal(err)
		}
		var out string
		for ev, err := range clientB.Follow(ctx, idB) {
			if err != nil {
				t.Fatalf("b follows its job: %v", err)
			}
			if ev.Type == jobs.EventOutput {
				out += string(ev.DataBytes())
			}
		}
		if out != "b\n" {
			t.Fatalf("b's output %q", out)
		}
		b.noViolation(t)
	})
	a.noViolation(t)
	wrk.noViolation(t)
}
