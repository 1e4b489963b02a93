package batch_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/pkg/batch"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/templates"
)

// Pass counts and pass@1 per label value: two samples of task t1 (one
// passes), one of t2 (passes) in language a, one failing in b; pass@1 of a
// is the mean over its tasks (0.5 and 1), not over its jobs.
func TestSummaryGroups(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, fleet.Topology{})
	input := strings.Join([]string{
		`{"image":"python","code":"print 1","labels":{"language":"a","task_id":"t1"}}`,
		`{"image":"python","code":"exit 1","labels":{"language":"a","task_id":"t1"}}`,
		`{"image":"python","code":"print 2","labels":{"language":"a","task_id":"t2"}}`,
		`{"image":"python","code":"exit 1","labels":{"language":"b","task_id":"t1"}}`,
	}, "\n")
	var col collector
	r, err := batch.New(b.client, col.config("groups"))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := r.Run(ctxFor(t, 30*time.Second), strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Passed != 2 || len(sum.Groups) != 2 {
		t.Fatalf("passed %d, groups %+v", sum.Passed, sum.Groups)
	}
	a, bb := sum.Groups[0], sum.Groups[1]
	if a.Label != "language" || a.Value != "a" || a.Total != 3 || a.Passed != 2 || a.PassAt1 != 0.75 {
		t.Errorf("group a %+v, want 2/3 passed, pass@1 0.75", a)
	}
	if bb.Value != "b" || bb.Total != 1 || bb.Passed != 0 || bb.PassAt1 != 0 {
		t.Errorf("group b %+v", bb)
	}
	if got := batch.FormatGroup(a); got != "language=a 2/3 passed, pass@1 0.750" {
		t.Errorf("text %q", got)
	}
	mf := r.Manifest(sum)
	if len(mf.Limits) != 1 || mf.Limits[0].Jobs != 4 || len(mf.Presets) != 1 {
		t.Errorf("manifest %+v", mf)
	}
}

// --retry errors: a job whose stored result is an error runs again as
// <id>-retry1, linked by retry_of; a job that succeeded is reused; a
// rerun reuses the retry.
func TestRetryErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, fleet.Topology{})
	ctx := ctxFor(t, 30*time.Second)
	for _, r := range []*jobs.Result{{ID: "broke", Status: jobs.StatusError, Error: "deliveries ran out"}, {ID: "fine", Status: jobs.StatusSucceeded}} {
		if _, _, err := records.StoreResult(ctx, b.stores.Results, r, 0); err != nil {
			t.Fatal(err)
		}
	}
	input := `{"id":"broke","image":"python","code":"print again"}` + "\n" + `{"id":"fine","image":"python","code":"print 1"}`
	for run := 1; run <= 2; run++ {
		var col collector
		cfg := col.config("retry")
		cfg.RetryErrors = true
		r, err := batch.New(b.client, cfg)
		if err != nil {
			t.Fatal(err)
		}
		sum, err := r.Run(ctx, strings.NewReader(input))
		if err != nil {
			t.Fatal(err)
		}
		o, ok := col.outcomes["broke-retry1"]
		if !ok || o.Result.RetryOf != "broke" || o.Result.Status != jobs.StatusSucceeded || o.Line != 1 {
			t.Fatalf("run %d: outcomes %+v", run, col.outcomes)
		}
		if _, ok := col.outcomes["fine"]; !ok || sum.Statuses[jobs.StatusSucceeded] != 2 || !sum.AllSucceeded() {
			t.Fatalf("run %d: summary %+v", run, sum)
		}
		if wantRetried := map[int]int{1: 1, 2: 0}[run]; sum.Retried != wantRetried {
			t.Errorf("run %d: retried %d, want %d", run, sum.Retried, wantRetried)
		}
	}
	if n := b.exec.Runs("broke-retry1"); n != 1 {
		t.Errorf("the retry ran %d times", n)
	}
}

func TestRetryID(t *testing.T) {
	t.Parallel()
	if got := batch.RetryID("a", 2); got != "a-retry2" {
		t.Errorf("%q", got)
	}
	long := strings.Repeat("x", 128)
	got := batch.RetryID(long, 1)
	if len(got) != 128 || !strings.HasSuffix(got, "-retry1") || !jobs.ValidID(got) || got == batch.RetryID(long[:127]+"y", 1) {
		t.Errorf("long: %q", got)
	}
}

// The manifest names the templates the batch's jobs ran on, with the
// versions of their registration.
func TestManifestTemplates(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, fleet.Topology{})
	ctx := ctxFor(t, 30*time.Second)
	for i, v := range []uint64{3, 5, 3} {
		r := &jobs.Result{ID: fmt.Sprintf("tp-%d", i), Status: jobs.StatusSucceeded,
			Template: &templates.Ref{Name: "repo-x", Version: v, Digest: "sha256:abc"}, ImageDigest: "sha256:abc"}
		if _, _, err := records.StoreResult(ctx, b.stores.Results, r, 0); err != nil {
			t.Fatal(err)
		}
	}
	var lines []string
	for i := range 3 {
		lines = append(lines, fmt.Sprintf(`{"id":"tp-%d","image":"repo-x","code":"print 1"}`, i))
	}
	var col collector
	r, err := batch.New(b.client, col.config("templates"))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := r.Run(ctx, strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	mf := r.Manifest(sum)
	if got := fmt.Sprint(mf.Templates); got != "map[repo-x:[3 5]]" {
		t.Errorf("manifest templates %s, want repo-x versions 3 and 5", got)
	}
}
