package main

import (
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/pkg/executor"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// The worker's session metrics on real Docker: a create counts and shows
// as running; a delete and an idle expiry count by their reason, and the
// running gauge comes back to 0.
func TestSessionMetricsDocker(t *testing.T) {
	t.Parallel()
	cfg := executor.Config{WorkerID: "sm-" + fmt.Sprint(time.Now().UnixNano()%1e6)}
	if img := os.Getenv("SANDFLEET_TEST_IMAGE"); img != "" {
		cfg.Presets = map[string]executor.Preset{"python": {Image: img, MainFile: "main.py", Argv: []string{"python3", "main.py"}}}
	}
	exec := workertest.Sandbox(t, cfg)
	addr, maddr := testutil.FreeAddr(t), testutil.FreeAddr(t)
	s := startServe(t, []string{"--embedded", "--listen", "127.0.0.1:-1", "--data-dir", t.TempDir(), "--id", "m1",
		"--http", addr, "--metrics", maddr, "--slots", "1", "--pool", "0", "--sessions", "3"}, exec)
	defer s.Stop(t)
	api := httpCall{t, "http://" + addr}
	testutil.Eventually(t, 30*time.Second, "the API up", func() bool {
		res, err := http.Get(api.base + "/v1/sessions")
		if err == nil {
			res.Body.Close()
		}
		return err == nil && res.StatusCode == 200
	})
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
