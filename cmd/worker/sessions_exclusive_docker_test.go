package main

import (
	"testing"

	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// An exclusive exec over HTTP, as a harness grading a session's work
// sends it: it runs alone, says so and how many of the session's
// processes it ended, and the background process it ended is listed as
// killed. With background it is a 400.
func TestSessionExclusiveExecOverHTTPDocker(t *testing.T) {
	t.Parallel()
	w := startAPIWorker(t, pythonSandbox(t, runID("sole")), "s1", "--slots", "1", "--pool", "0", "--sessions", "1")
	w.sessionsUp(t)
	api := w.api
	var info sessions.Info
	api.do("POST", "/v1/sessions", map[string]any{"image": "python", "idle_timeout": "2m"}, 201, &info)
	p := "/v1/sessions/" + info.ID

	var bg sessionapi.ExecResult
	api.do("POST", p+"/exec", map[string]any{"shell": "sleep 300", "background": true}, 200, &bg)
	var r sessionapi.ExecResult
	api.do("POST", p+"/exec", map[string]any{"shell": "echo verdict; exit 3", "exclusive": true}, 200, &r)
	if !r.Exclusive || r.Ended < 1 || r.Stdout != "verdict\n" || r.ExitCode == nil || *r.ExitCode != 3 {
		t.Fatalf("exclusive exec: %+v, want it alone with its own output and exit 3, the sleep ended", r)
	}
	var ps struct{ Processes []sessionapi.Process }
	api.do("GET", p+"/processes", nil, 200, &ps)
	if len(ps.Processes) != 1 || ps.Processes[0].PID != bg.PID || ps.Processes[0].Running || ps.Processes[0].Signal != 9 {
		t.Errorf("processes after an exclusive exec: %+v, want %d killed by 9", ps.Processes, bg.PID)
	}
	api.do("POST", p+"/exec", map[string]any{"shell": "true", "exclusive": true, "background": true}, 400, nil)
	var plain sessionapi.ExecResult
	api.do("POST", p+"/exec", map[string]any{"shell": "true"}, 200, &plain)
	if plain.Exclusive || plain.Ended != 0 {
		t.Errorf("a plain exec says %+v", plain)
	}
	api.do("DELETE", p, nil, 200, nil)
}
