package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/templates"
)

// A job naming a template runs on it once the worker has heard of the
// registration, with no restart: its image, its env, and a sandbox its
// start command and ready check ran in first. The start command writes a
// file only after a second, so a job handed the sandbox before the ready
// check passed would not find it. The result names the template, the
// registration's version and the image. A template whose ready check
// never passes ends its jobs as errors saying so; one removed is refused.
// A session names the template as a job does.
func TestTemplateStartAndReadyDocker(t *testing.T) {
	t.Parallel()
	w := startAPIWorker(t, pythonSandbox(t, runID("tmpl")), "t1", "--slots", "2", "--pool", "1")
	_, js := natstest.Connect(t, w.url)
	reg, err := templates.Open(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	image := executor.DefaultImage
	if img := os.Getenv("SANDFLEET_TEST_IMAGE"); img != "" {
		image = img
	}
	stored, err := reg.Put(t.Context(), templates.Template{Name: "warm-repo", Image: image, MainFile: "main.py",
		Argv: []string{"python3", "main.py"}, Env: map[string]string{"GREETING": "from the template"},
		Start: []string{"sh", "-c", "sleep 1; echo started > /tmp/started"}, Ready: []string{"test", "-e", "/tmp/started"},
		Limits: limits.Limits{Timeout: limits.Duration(20 * time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	run := func(image, code string) jobs.Result {
		t.Helper()
		n++
		var res jobs.Result
		w.api.do("POST", "/v1/jobs?wait=60s", map[string]any{"id": fmt.Sprintf("tmpl-%d", n), "image": image, "code": code}, 200, &res)
		return res
	}
	code := "import os\nprint(open('/tmp/started').read().strip(), os.environ['GREETING'])"
	var res jobs.Result
	testutil.Eventually(t, 60*time.Second, "the worker runs the template's jobs", func() bool {
		res = run("warm-repo", code)
		return res.Status != jobs.StatusRejected || !strings.Contains(res.Error, "unknown preset or template")
	})
	if res.Status != jobs.StatusSucceeded || res.Stdout != "started from the template\n" {
		data, _ := json.Marshal(res)
		t.Fatalf("a job on the template: %s", data)
	}
	if res.Template == nil || res.Template.Name != "warm-repo" || res.Template.Version != stored.Version ||
		!strings.HasPrefix(res.Template.Digest, "sha256:") {
		t.Errorf("the result's template: %+v, want warm-repo version %d with the image's ID", res.Template, stored.Version)
	}

	w.sessionsUp(t)
	var sess struct {
		ID string `json:"id"`
	}
	w.api.do("POST", "/v1/sessions", map[string]any{"image": "warm-repo"}, 201, &sess)
	var ex struct {
		ExitCode *int   `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	w.api.do("POST", "/v1/sessions/"+sess.ID+"/exec", map[string]any{"shell": `echo "$(cat /tmp/started) $GREETING"`}, 200, &ex)
	if ex.ExitCode == nil || *ex.ExitCode != 0 || ex.Stdout != "started from the template\n" {
		t.Errorf("a session of the template: exit %v stdout %q", ex.ExitCode, ex.Stdout)
	}
	w.api.do("DELETE", "/v1/sessions/"+sess.ID, nil, 200, nil)

	if _, err := reg.Put(t.Context(), templates.Template{Name: "never-ready", Image: image, MainFile: "main.py",
		Argv: []string{"python3", "main.py"}, Ready: []string{"false"}, ReadyTimeout: limits.Duration(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "a job of a template that is never ready ends as an error", func() bool {
		res = run("never-ready", "print(1)")
		return res.Status == jobs.StatusError && strings.Contains(res.Error, "ready")
	})

	if err := reg.Delete(t.Context(), "", "warm-repo"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "a removed template's jobs are refused", func() bool {
		res = run("warm-repo", code)
		return res.Status == jobs.StatusRejected && strings.Contains(res.Error, "warm-repo")
	})
}

// A template with a pool keeps its own warm sandboxes, prepared before any
// job exists, and refills them after each job on its own: the presets'
// pool is off here (--pool 0), so every warm sandbox is the template's.
// Each job reads when its sandbox's start command ran, which is before
// the job was queued.
func TestTemplatePoolDocker(t *testing.T) {
	t.Parallel()
	id := runID("tpool")
	w := startAPIWorker(t, pythonSandbox(t, id), "tp1", "--slots", "1", "--pool", "0")
	_, js := natstest.Connect(t, w.url)
	reg, err := templates.Open(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	image := executor.DefaultImage
	if img := os.Getenv("SANDFLEET_TEST_IMAGE"); img != "" {
		image = img
	}
	if _, err := reg.Put(t.Context(), templates.Template{Name: "pooled", Image: image, MainFile: "main.py",
		Argv: []string{"python3", "main.py"}, Start: []string{"sh", "-c", "date +%s%N > /tmp/born"},
		Ready: []string{"test", "-s", "/tmp/born"}, Pool: 1}); err != nil {
		t.Fatal(err)
	}
	// Ready once its start and ready ran: the worker's heartbeat says so
	// (a container alone may still be being prepared).
	// A heartbeat written after the previous job ended, so that it tells of
	// the refill.
	warm := func(after time.Time) int {
		var st jobs.FleetStatus
		w.api.do("GET", "/v1/status", nil, 200, &st)
		for _, wk := range st.Workers {
			if wk.ID == "tp1" && wk.Pool != nil && wk.LastSeen.After(after) {
				return wk.Pool.Templates
			}
		}
		return 0
	}
	var after time.Time
	for round := range 2 {
		testutil.Eventually(t, 60*time.Second, "the template's warm sandbox prepared", func() bool { return warm(after) == 1 })
		var res jobs.Result
		w.api.do("POST", "/v1/jobs?wait=60s", map[string]any{"id": fmt.Sprintf("tpool-%d", round), "image": "pooled",
			"code": "print(open('/tmp/born').read().strip())"}, 200, &res)
		if res.Status != jobs.StatusSucceeded || res.QueuedAt == nil {
			t.Fatalf("round %d: %+v", round, res)
		}
		var born int64
		fmt.Sscan(strings.TrimSpace(res.Stdout), &born)
		if b := time.Unix(0, born); !b.Before(*res.QueuedAt) {
			t.Errorf("round %d: the sandbox was started at %s, after the job was queued at %s: not a warm one", round, b, res.QueuedAt)
		}
		after = *res.FinishedAt
	}
}
