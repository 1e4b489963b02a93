package main

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/templates"
)

// A tenant's template's start command runs before its job's timeout is
// counted, within its ready_timeout (up to 10m), which a tenant sets: a
// worker whose cap on a job's time is 2s must not give a tenant's job
// 6s of its sandbox's CPU in a start command, nor hold a slot that long.
// The start and ready of a tenant's template are bounded by the job's
// timeout too.
func TestTenantTemplateStartWithinJobTimeoutDocker(t *testing.T) {
	t.Parallel()
	cfg := executor.Config{WorkerID: runID("tready"), Caps: limits.Caps{Timeout: limits.Duration(2 * time.Second)},
		Defaults: limits.Limits{Timeout: limits.Duration(2 * time.Second)}}
	image := executor.DefaultImage
	if img := os.Getenv("SANDFLEET_TEST_IMAGE"); img != "" {
		image = img
		cfg.Presets = map[string]executor.Preset{"python": {Image: img, MainFile: "main.py", Argv: []string{"python3", "main.py"}}}
	}
	w := startAPIWorker(t, workertest.Sandbox(t, cfg), "tr1", "--slots", "1", "--pool", "0")
	_, js := natstest.Connect(t, w.url)
	testutil.Eventually(t, 30*time.Second, "the worker's results bucket", func() bool {
		_, err := js.KeyValue(t.Context(), fleet.ResultsBucket)
		return err == nil
	})
	reg, err := templates.Open(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Work the job could not do in its 2s, done before the job starts.
	long := templates.Template{Name: "long-start", Image: image, MainFile: "main.py", Argv: []string{"python3", "main.py"},
		Start:        []string{"sh", "-c", "sleep 6; echo worked > /tmp/worked"},
		Ready:        []string{"test", "-e", "/tmp/worked"},
		ReadyTimeout: limits.Duration(time.Minute)}
	if _, err := reg.PutTenant(t.Context(), "team-a", long, templates.TenantPolicy{}); err != nil {
		t.Fatal(err)
	}
	_, tjs := natstest.Connect(t, w.url, jobs.TenantOptions("team-a")...)
	c, err := jobs.NewTenantClient(tjs, "team-a", jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var res *jobs.Result
	testutil.Eventually(t, 60*time.Second, "the worker serves team-a's template", func() bool {
		res, err = c.SubmitAndWait(t.Context(), &jobs.Job{Image: "long-start", Code: "print(open('/tmp/worked').read().strip())"})
		if err != nil {
			t.Fatal(err)
		}
		return res.Status != jobs.StatusRejected
	})
	if res.Status == jobs.StatusSucceeded {
		data, _ := json.Marshal(res)
		t.Fatalf("a start command ran 6s for a job capped at 2s: %s", data)
	}
}
