package batch_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/pkg/batch"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// With --retry errors a line's retries take IDs of their own, <id>-retry<n>:
// another line whose own ID is one of them is a bad line, in either order,
// and a retry ID whose stored result is another job's (a run without
// --retry ran a line of that ID) is passed over. Before, the flights of
// the two shared an ID: the run hung with one lost, or one result was
// reported for two lines.
func TestRetryIDOfAnotherLine(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		input  string
		good   string // the ID of the line that is not bad
		window int
	}{
		"the retried line first": {`{"id":"x","image":"python","code":"print 1"}` + "\n" + `{"id":"x-retry1","image":"python","code":"print 2"}`, "x", 0},
		"the retried line last":  {`{"id":"x-retry1","image":"python","code":"print 2"}` + "\n" + `{"id":"x","image":"python","code":"print 1"}`, "x-retry1", 0},
		"both in one window":     {`{"id":"x","image":"python","code":"print 1"}` + "\n" + `{"id":"x-retry1","image":"python","code":"print 2"}`, "x", 2},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, 2, fleet.Topology{})
			ctx := ctxFor(t, 30*time.Second)
			// A first run without --retry: x failed on the fleet's side,
			// the line of ID x-retry1 succeeded.
			for _, r := range []*jobs.Result{{ID: "x", Status: jobs.StatusError, Error: "deliveries ran out"}, {ID: "x-retry1", Status: jobs.StatusSucceeded}} {
				if _, _, err := records.StoreResult(ctx, b.stores.Results, r, 0); err != nil {
					t.Fatal(err)
				}
			}
			var col collector
			cfg := col.config("collide")
			cfg.RetryErrors, cfg.Window = true, tc.window
			r, err := batch.New(b.client, cfg)
			if err != nil {
				t.Fatal(err)
			}
			runCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			if _, err := r.Run(runCtx, strings.NewReader(tc.input)); err != nil {
				t.Fatalf("Run: %v (outcomes %v, progress %+v)", err, col.byLine(), r.Progress())
			}
			if len(col.bad) != 1 || col.bad[0].Line != 2 || !strings.Contains(col.bad[0].Err.Error(), "x-retry1") {
				t.Errorf("bad lines %+v, want line 2 naming x-retry1", col.bad)
			}
			res := col.byLine()[1].Result
			switch {
			case len(col.byLine()) != 1 || res == nil || res.Status != jobs.StatusSucceeded:
				t.Errorf("outcomes %+v, want line 1's only", col.byLine())
			case tc.good == "x" && (res.RetryOf != "x" || res.ID == "x-retry1"):
				t.Errorf("line x: %s (retry of %q), want a retry of its own", res.ID, res.RetryOf)
			case tc.good == "x-retry1" && (res.ID != "x-retry1" || res.RetryOf != ""):
				t.Errorf("line x-retry1: %s (retry of %q), want its own result", res.ID, res.RetryOf)
			}
		})
	}
}
