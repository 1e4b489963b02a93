package main

import (
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// The worker's session metrics on real Docker: a create counts and shows
// as running; a delete and an idle expiry count by their reason, and the
// running gauge comes back to 0.
func TestSessionMetricsDocker(t *testing.T) {
	t.Parallel()
	maddr := testutil.FreeAddr(t)
	w := startAPIWorker(t, pythonSandbox(t, runID("sm")), "m1", "--metrics", maddr, "--slots", "1", "--pool", "0", "--sessions", "3")
	w.sessionsUp(t)
	api := w.api
	// The sessions are set up beside the jobs: their gauges come with them.
	testutil.Eventually(t, 30*time.Second, "sandfleet_sessions_max at 3", func() bool { return metric(maddr, "sandfleet_sessions_max") == 3 })
	var a, b sessions.Info
	api.do("POST", "/v1/sessions", map[string]any{"image": "python"}, 201, &a)
	api.do("POST", "/v1/sessions", map[string]any{"image": "python", "idle_timeout": "1s"}, 201, &b)
	if c, r := metric(maddr, "sandfleet_sessions_created_total"), metric(maddr, `sandfleet_sessions{state="running"}`); c != 2 || r < 1 {
		t.Fatalf("after two creates: created %v, running %v", c, r)
	}
	api.do("DELETE", "/v1/sessions/"+a.ID, nil, 200, nil)
	testutil.Eventually(t, 30*time.Second, "the delete and the idle expiry counted, none running", func() bool {
		return metric(maddr, `sandfleet_sessions_ended_total{reason="deleted"}`) == 1 &&
			metric(maddr, `sandfleet_sessions_ended_total{reason="idle"}`) == 1 &&
			metric(maddr, `sandfleet_sessions{state="running"}`) == 0
	})
}
