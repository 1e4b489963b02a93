package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// A job whose result would be far over what the server takes (512 refused
// destinations, each a 30 KB host quoted twice in its reason: 46 MB, as a
// flood through the egress proxy made it) gets one stored result, its
// egress list cut with the cut said, and runs exactly once.
func TestOversizedEgressIsCutNotRunAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	again := make(chan struct{})
	runs := 0
	b.exec.OnRun = func(id string) {
		if runs++; runs == 2 {
			close(again)
		}
	}
	b.startWorker(t, worker.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	type outcome struct {
		res *jobs.Result
		err error
	}
	got := make(chan outcome, 1)
	go func() {
		res, err := b.client.SubmitAndWait(ctx, &jobs.Job{ID: "flood", Image: "python", Code: "print hello\negresses 512 30000"})
		got <- outcome{res, err}
	}()
	var o outcome
	select {
	case <-again:
		t.Fatal("the job ran a second time: its result was not stored")
	case o = <-got:
	}
	if o.err != nil {
		t.Fatal(o.err)
	}
	res := o.res
	if res.Status != jobs.StatusSucceeded || res.Attempt != 1 || b.exec.Runs("flood") != 1 {
		t.Fatalf("status %s attempt %d runs %d, want succeeded once", res.Status, res.Attempt, b.exec.Runs("flood"))
	}
	if res.Stdout != "hello\n" || res.StdoutTruncated {
		t.Errorf("stdout %q (truncated %v): the egress list goes before any output", res.Stdout, res.StdoutTruncated)
	}
	if len(res.Egress) == 0 || len(res.Egress) >= 512 || len(res.Cut) != 1 || !strings.HasPrefix(res.Cut[0], "egress: ") {
		t.Fatalf("%d egress entries kept, cut %q: want some of the 512 and a line saying so", len(res.Egress), res.Cut)
	}
	stored, err := b.client.Get(ctx, "flood")
	if err != nil || stored == nil || len(stored.Egress) != len(res.Egress) || len(stored.Cut) != 1 {
		t.Fatalf("stored result: %v %+v", err, stored != nil)
	}
	t.Logf("kept %d of 512 destinations: %s", len(res.Egress), res.Cut[0])
}
