package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/sessionhost"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/pkg/executor"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// realSessions serves sessions on real Docker sandboxes.
func realSessions(t testing.TB, js jetstream.JetStream) *sessions.Client {
	cfg := executor.Config{WorkerID: fmt.Sprintf("console-sess-%d", os.Getpid())}
	if img := os.Getenv("SANDFLEET_TEST_IMAGE"); img != "" {
		cfg.Presets = map[string]executor.Preset{"python": {Image: img, MainFile: "main.py", Argv: []string{"python3", "main.py"}}}
	}
	exec := workertest.Sandbox(t, cfg)
	host, err := sessionhost.New(t.Context(), js, func(ctx context.Context, s sessionhost.StartSpec) (sessionhost.Sandbox, error) {
		return exec.StartSession(ctx, executor.SessionSpec{ID: s.ID, Image: s.Image, Limits: s.Limits, Lifetime: s.Lifetime, OnEvent: s.OnEvent})
	}, sessionhost.Config{Worker: "w-sessions", Limits: exec.ResolveLimits, Images: exec.HasPreset})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- host.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	c, err := sessions.NewClient(t.Context(), js, "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *fleet) api(t *testing.T, method, path string, body any, want int, out any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(t.Context(), method, f.url+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+f.alice)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != want {
		t.Fatalf("%s %s: %d", method, path, res.StatusCode)
	}
	if out != nil {
		_ = json.NewDecoder(res.Body).Decode(out)
	}
}

// The sessions pages in a browser, on real Docker sessions: the list
// shows the viewer's session with its owner, worker and processes; its
// page opens a terminal in which what is typed runs and its output shows.
func TestBrowserSessions(t *testing.T) {
	testutil.NeedBrowser(t)
	f := setup(t, options{sessions: realSessions})
	var info sessions.Info
	f.api(t, "POST", "/v1/sessions", map[string]any{"image": "python"}, http.StatusCreated, &info)
	f.api(t, "POST", "/v1/sessions/"+info.ID+"/exec", map[string]any{"cmd": []string{"sleep", "300"}, "background": true}, http.StatusOK, nil)
	b := startBrowser(t, f, 1280, 900)

	b.do(t, "sessions page", chromedp.Navigate(f.url+"/sessions"), chromedp.WaitVisible(chromedp.ID("sessions")))
	row := b.text(t, "#sessions tbody tr")
	for _, want := range []string{info.ID, "running", "alice", "w-sessions", "python"} {
		if !strings.Contains(row, want) {
			t.Fatalf("the session's row %q lacks %q", row, want)
		}
	}
	if got := eval[string](t, b, "document.querySelector('#sessions tbody tr td:last-child').textContent"); got != "1" {
		t.Fatalf("processes: %q, want 1", got)
	}
	b.screenshot(t, "sessions")

	b.do(t, "session page", chromedp.Navigate(f.url+"/sessions/"+info.ID), chromedp.WaitVisible(chromedp.ID("processes")))
	b.waitText(t, "#processes", "sleep 300", 5*time.Second)
	b.do(t, "open the terminal", chromedp.Click(chromedp.ID("terminal-open")))
	b.waitText(t, "#terminal-status", "connected", 20*time.Second)
	b.waitText(t, "#terminal", "$", 20*time.Second) // the shell's prompt
	b.do(t, "type in the terminal", chromedp.KeyEvent("echo hel''lo"), chromedp.KeyEvent(kb.Enter))
	b.waitText(t, "#terminal", "hello", 20*time.Second)
	b.screenshot(t, "session")
	b.noDialogs(t)
}
