package compose

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// TestSecurityEvents proves the roles of nats.conf on a job's events: a
// worker creates the stream EVENTS and publishes into it; a submitter
// follows a job from its start to its result, refused nothing, but cannot
// publish an event, delete one, or change, purge or delete the stream.
func TestSecurityEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topo := fleet.Topology{AckWait: 5 * time.Second}
	wrk, sub := roles(t, ctx, topo)
	workertest.Start(t, wrk.js, &fakeexec.Executor{}, worker.Config{ID: "w-events", Slots: 1, Topology: topo})
	client, err := jobs.NewClient(ctx, sub.js, jobs.Config{})
	if err != nil {
		t.Fatalf("submitter: open client: %v", err)
	}

	const id = "watched-1"
	if _, err := client.Submit(ctx, &jobs.Job{ID: id, Image: "python", Code: "print hello\neprint warn\nexit 4"}); err != nil {
		t.Fatal(err)
	}
	follow := func() (types []string, stdout string, res *jobs.Result) {
		t.Helper()
		for ev, err := range client.Follow(ctx, id) {
			if err != nil {
				t.Fatalf("submitter: follow: %v (after %q)", err, types)
			}
			types = append(types, string(ev.Type))
			if ev.Type == jobs.EventOutput && ev.Stream == jobs.Stdout {
				stdout += string(ev.DataBytes())
			}
			res = ev.Result
		}
		return types, stdout, res
	}
	types, stdout, res := follow()
	if got := strings.Join(types, " "); got != "queued started output output finished" || stdout != "hello\n" ||
		res == nil || res.Status != jobs.StatusFailed || res.Stdout != "hello\n" {
		t.Fatalf("submitter followed %q, stdout %q, result %+v", got, stdout, res)
	}
	sub.noViolation(t)
	wrk.noViolation(t)

	t.Run("submitter cannot publish an event", func(t *testing.T) {
		forged, _ := records.MarshalEvent(&jobs.Event{Type: jobs.EventOutput, ID: id, Attempt: 1, Stream: jobs.Stdout, Offset: 6, Data: "forged\n"})
		if err := sub.nc.Publish(fleet.EventSubject(id), forged); err != nil {
			t.Fatal(err)
		}
		sub.expectViolation(t, fleet.EventSubject(id))
		cctx, done := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer done()
		if _, err := sub.js.Publish(cctx, fleet.EventSubject("other"), forged); err == nil {
			t.Fatal("submitter stored an event")
		}
		sub.expectViolation(t, fleet.EventSubject("other"))
		if _, stdout, _ := follow(); stdout != "hello\n" {
			t.Errorf("after the forgery the job's stdout events say %q", stdout)
		}
	})

	t.Run("submitter cannot change the events", func(t *testing.T) {
		events, err := sub.js.Stream(ctx, fleet.EventsStreamName)
		if err != nil {
			t.Fatalf("stream info is allowed: %v", err)
		}
		for _, tc := range []struct {
			subject string
			op      func(context.Context) error
		}{
			{"$JS.API.STREAM.MSG.DELETE.EVENTS", func(ctx context.Context) error { return events.DeleteMsg(ctx, 1) }},
			{"$JS.API.STREAM.PURGE.EVENTS", func(ctx context.Context) error { return events.Purge(ctx) }},
			{"$JS.API.STREAM.UPDATE.EVENTS", func(ctx context.Context) error {
				_, err := sub.js.UpdateStream(ctx, jetstream.StreamConfig{Name: fleet.EventsStreamName, Subjects: []string{"events.>", "forge.>"}})
				return err
			}},
			{"$JS.API.STREAM.DELETE.EVENTS", func(ctx context.Context) error { return sub.js.DeleteStream(ctx, fleet.EventsStreamName) }},
		} {
			cctx, done := context.WithTimeout(ctx, 1500*time.Millisecond)
			if err := tc.op(cctx); err == nil {
				t.Errorf("%s: allowed", tc.subject)
			}
			done()
			sub.expectViolation(t, tc.subject)
		}
		stream, err := wrk.js.Stream(ctx, fleet.EventsStreamName)
		if err != nil {
			t.Fatal(err)
		}
		info, err := stream.Info(ctx)
		if err != nil || info.State.Msgs != 4 || info.State.FirstSeq != 1 {
			t.Errorf("EVENTS after the attempts: %+v, %v; want the job's 4 events, untouched", info.State, err)
		}
	})
}
