package compose

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/jobindex"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// TestSecurityIndex proves the roles of nats.conf on the job index (the
// console's lists): a worker creates the stream INDEX and writes a job's
// records; a submitter lists and reads them, refused nothing, but cannot
// write a record, delete one, or change, purge or delete the stream.
func TestSecurityIndex(t *testing.T) {
	s := startConfiguredServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wrk := connect(t, s, "worker", testWorkerPassword)
	sub := connect(t, s, "submitter", testSubmitterPassword)
	topo := fleet.Topology{AckWait: 5 * time.Second}
	if _, err := topo.Ensure(ctx, wrk.js); err != nil {
		t.Fatalf("worker: ensure topology: %v", err)
	}
	workertest.Start(t, wrk.js, &fakeexec.Executor{}, worker.Config{ID: "w-index", Slots: 1, Topology: topo})
	client, err := jobs.NewClient(ctx, sub.js, jobs.Config{})
	if err != nil {
		t.Fatalf("submitter: open client: %v", err)
	}
	if res, err := client.SubmitAndWait(ctx, &jobs.Job{ID: "listed-1", Image: "python", Code: "print hi"}); err != nil || res.Status != jobs.StatusSucceeded {
		t.Fatalf("job: %+v %v", res, err)
	}
	idx, err := jobindex.Open(ctx, sub.js)
	if err != nil {
		t.Fatalf("submitter: bind the index: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, "the job listed as finished", func() bool {
		page, err := idx.List(ctx, jobindex.Query{})
		return err == nil && len(page.Jobs) == 1 && page.Jobs[0].State == records.Finished
	})
	if _, err := idx.Summary(ctx, "listed-1"); err != nil {
		t.Errorf("submitter: summary: %v", err)
	}
	if _, err := idx.Spec(ctx, "listed-1"); err != nil {
		t.Errorf("submitter: spec: %v", err)
	}
	if _, _, err := idx.DeadLetters(ctx, 10); err != nil {
		t.Errorf("submitter: dead letters: %v", err)
	}
	sub.noViolation(t)
	wrk.noViolation(t)

	forged := []byte(`{"id":"listed-1","queue":"default","state":"finished","status":"succeeded"}`)
	subject := fleet.IndexJobSubject("default", records.NoBatch, "listed-1")
	if err := sub.nc.Publish(subject, forged); err != nil {
		t.Fatal(err)
	}
	sub.expectViolation(t, subject)
	stream, err := sub.js.Stream(ctx, fleet.IndexStreamName)
	if err != nil {
		t.Fatalf("stream info is allowed: %v", err)
	}
	for _, tc := range []struct {
		subject string
		op      func(context.Context) error
	}{
		{"$JS.API.STREAM.MSG.DELETE.INDEX", func(ctx context.Context) error { return stream.DeleteMsg(ctx, 1) }},
		{"$JS.API.STREAM.PURGE.INDEX", func(ctx context.Context) error { return stream.Purge(ctx) }},
		{"$JS.API.STREAM.UPDATE.INDEX", func(ctx context.Context) error {
			_, err := sub.js.UpdateStream(ctx, jetstream.StreamConfig{Name: fleet.IndexStreamName, Subjects: []string{"index.>", "forge.>"}})
			return err
		}},
		{"$JS.API.STREAM.DELETE.INDEX", func(ctx context.Context) error { return sub.js.DeleteStream(ctx, fleet.IndexStreamName) }},
	} {
		cctx, done := context.WithTimeout(ctx, 1500*time.Millisecond)
		if err := tc.op(cctx); err == nil {
			t.Errorf("%s: allowed", tc.subject)
		}
		done()
		sub.expectViolation(t, tc.subject)
	}
	// A worker may not purge the index either.
	wstream, err := wrk.js.Stream(ctx, fleet.IndexStreamName)
	if err != nil {
		t.Fatal(err)
	}
	cctx, done := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer done()
	if err := wstream.Purge(cctx); err == nil {
		t.Error("worker purged INDEX")
	}
	wrk.expectViolation(t, "$JS.API.STREAM.PURGE.INDEX")
	s2, err := idx.Summary(ctx, "listed-1")
	if err != nil || s2.State != records.Finished || s2.Worker != "w-index" {
		t.Errorf("the record after the attempts: %+v %v", s2, err)
	}
}
