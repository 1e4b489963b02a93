package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
)

// The interop tests: MCP clients nobody here wrote, on their defaults,
// against a real worker --embedded (gateway, tokens, sessions) running
// real Python on Docker. Each client does what an agent does: connect
// (its own protocol negotiation), list the tools, run code, keep a
// session, a long call with progress, cancel (explicitly, and by dropping
// the call), read an error, and fail cleanly on a bad token.

// agent is one MCP client, as the scenario drives it.
type agent interface {
	// protocol is the revision the connection settled on.
	protocol() string
	serverVersion() string
	// tools are the names tools/list gave, and whether run_code has an
	// outputSchema.
	tools(ctx context.Context) ([]string, bool, error)
	call(ctx context.Context, name string, args map[string]any, progressToken string) (*callResult, error)
	// progress is how many progress notifications a token heard.
	progress(token string) int
}

type callResult struct {
	isError    bool
	text       string
	structured map[string]any
	images     []string // MIME types of the image content
}

// heard counts progress notifications by token.
type heard struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *heard) add(token any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[jsonString(token)]++
}

func (h *heard) count(token string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[token]
}

func jsonString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	data, _ := json.Marshal(v)
	return string(data)
}

// structured decodes a structuredContent of any shape into a map.
func structured(v any) map[string]any {
	if v == nil {
		return nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	return m
}

// interopFleet is a worker --embedded with a token, on real Docker.
type interopFleet struct {
	id, base, token string
}

func startInteropFleet(t *testing.T, id string) *interopFleet {
	t.Helper()
	cfg, err := executorConfig(&options{id: id})
	if err != nil {
		t.Fatal(err)
	}
	secret, line, err := gateway.NewToken("agent", nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := startAPIWorker(t, &executor.Service{Executor: workertest.Sandbox(t, cfg)}, id, "--slots", "3", "--tokens", path)
	f := &interopFleet{id: id, base: "http://" + w.addr, token: secret}
	testutil.Eventually(t, 30*time.Second, "the API and its sessions up", func() bool {
		return f.status(t, http.MethodGet, "/v1/sessions", nil) == http.StatusOK
	})
	return f
}

// status sends a request as the token and returns its status.
func (f *interopFleet) status(t *testing.T, method, path string, out any) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, f.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+f.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer res.Body.Close()
	if out != nil {
		_ = json.NewDecoder(res.Body).Decode(out)
	}
	return res.StatusCode
}

// runningJob waits for a job to run on the fleet (its container up, its
// status running: an earlier job's container may still be going away) and
// returns its ID.
func (f *interopFleet) runningJob(t *testing.T) string {
	t.Helper()
	var id string
	testutil.Eventually(t, 60*time.Second, "a job running", func() bool {
		out, err := exec.Command("docker", "ps", "--filter", "label="+executor.LabelWorker+"="+f.id,
			"--filter", "label="+executor.LabelJob, "--format", `{{.Label "`+executor.LabelJob+`"}}`).Output()
		if err != nil {
			return false
		}
		for _, id = range strings.Fields(string(out)) {
			var r struct {
				Status string `json:"status"`
			}
			if f.status(t, http.MethodGet, "/v1/jobs/"+id, &r) == http.StatusAccepted && r.Status == "running" {
				return true
			}
		}
		return false
	})
	return id
}

// canceled waits for job id to end canceled.
func (f *interopFleet) canceled(t *testing.T, id, how string) {
	t.Helper()
	var r struct {
		Status string `json:"status"`
	}
	var code int
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if code = f.status(t, http.MethodGet, "/v1/jobs/"+id, &r); code == http.StatusOK && r.Status == "canceled" {
			return
		}
	}
	t.Errorf("%s: job %s is %d %q after 30s, want canceled", how, id, code, r.Status)
}

// sleeper runs long enough to be canceled, and says it started.
const sleeper = "import time\nprint('started', flush=True)\ntime.sleep(120)"

// scenario is what every client does. sessions: the server has the tools
// of sessions (HTTP; `submit mcp` serves run_code alone).
func scenario(t *testing.T, f *interopFleet, a agent, sessions bool) {
	ctx := t.Context()
	tools, hasSchema, err := a.tools(ctx)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	want := []string{"run_code"}
	if sessions {
		want = []string{"close_session", "create_session", "exec", "expose_port", "list_files", "read_file", "run_code", "write_file"}
	}
	slices.Sort(tools)
	if !slices.Equal(tools, want) || !hasSchema {
		t.Errorf("tools/list: %v (run_code's outputSchema %v), want %v", tools, hasSchema, want)
	}

	res := mustCall(t, a, "run_code", map[string]any{"language": "python", "code": "print(6*7)"})
	if res.isError || !strings.Contains(res.text, "42") || res.structured["status"] != "succeeded" ||
		res.structured["stdout"] != "42\n" || res.structured["exit_code"] != 0.0 || res.structured["job"] == "" {
		t.Errorf("run_code print(6*7): isError %v, %q, structured %v", res.isError, res.text, res.structured)
	}

	res = mustCall(t, a, "run_code", map[string]any{"language": "python", "code": "import sys\nprint('boom', file=sys.stderr)\nsys.exit(3)"})
	if !res.isError || !strings.Contains(res.text, "exit code 3") || res.structured["exit_code"] != 3.0 ||
		!strings.Contains(jsonString(res.structured["stderr"]), "boom") {
		t.Errorf("an error: isError %v, %q, structured %v", res.isError, res.text, res.structured)
	}

	if sessions {
		sessionFlow(t, a)
	}

	// A call longer than the server's progress period (10 s) hears that
	// it still runs.
	res = mustCallProgress(t, a, "run_code", map[string]any{"language": "python", "code": "import time\ntime.sleep(12)\nprint('slept')"}, "long-1")
	if res.isError || !strings.Contains(res.text, "slept") {
		t.Errorf("a long call: %q", res.text)
	}
	testutil.Eventually(t, 10*time.Second, "the long call's progress heard", func() bool { return a.progress("long-1") >= 1 })

	figure(t, a)
}

// sessionFlow: a session created, a cell run without a language (the
// session decides it), state kept, a command, the session closed.
func sessionFlow(t *testing.T, a agent) {
	t.Helper()
	var id string
	testutil.Eventually(t, 60*time.Second, "a session created", func() bool {
		res := mustCall(t, a, "create_session", map[string]any{})
		id, _, _ = strings.Cut(strings.TrimPrefix(res.text, "session: "), "\n")
		return !res.isError && strings.HasPrefix(res.text, "session: ")
	})
	if res := mustCall(t, a, "run_code", map[string]any{"code": "n = 6", "session": id}); res.isError {
		t.Fatalf("a cell without a language: %q", res.text)
	}
	res := mustCall(t, a, "run_code", map[string]any{"code": "n * 7", "session": id})
	if res.isError || res.structured["value"] != "42" || res.structured["session"] != id {
		t.Errorf("a cell's value: %q, structured %v", res.text, res.structured)
	}
	res = mustCall(t, a, "run_code", map[string]any{"code": "1/0", "session": id})
	if errv, _ := res.structured["error"].(map[string]any); !res.isError || errv["name"] != "ZeroDivisionError" {
		t.Errorf("a raising cell: isError %v, structured %v", res.isError, res.structured)
	}
	res = mustCall(t, a, "exec", map[string]any{"session": id, "command": "echo hi; exit 4"})
	if !res.isError || res.structured["exit_code"] != 4.0 || res.structured["stdout"] != "hi\n" {
		t.Errorf("exec: isError %v, %q, structured %v", res.isError, res.text, res.structured)
	}
	if res := mustCall(t, a, "close_session", map[string]any{"session": id}); res.isError {
		t.Errorf("close_session: %q", res.text)
	}
	if res := mustCall(t, a, "exec", map[string]any{"session": id, "command": "true"}); !res.isError {
		t.Errorf("exec after close: %q", res.text)
	}
}

// figure: a matplotlib figure comes back as an image, referenced in the
// structured result; only where the python-data image is built.
func figure(t *testing.T, a agent) {
	t.Helper()
	if err := exec.Command("docker", "image", "inspect", executor.DataImage).Run(); err != nil {
		t.Logf("no figure: %s is not built (./sandbox-image/build.sh data)", executor.DataImage)
		return
	}
	res := mustCall(t, a, "run_code", map[string]any{"language": "python-data",
		"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"})
	figs, _ := res.structured["figures"].([]any)
	if res.isError || len(res.images) != 1 || res.images[0] != "image/png" || len(figs) != 1 {
		t.Errorf("a figure: isError %v, images %v, structured figures %v, %q", res.isError, res.images, figs, res.text)
	}
}

func mustCall(t *testing.T, a agent, name string, args map[string]any) *callResult {
	t.Helper()
	return mustCallProgress(t, a, name, args, "")
}

func mustCallProgress(t *testing.T, a agent, name string, args map[string]any, token string) *callResult {
	t.Helper()
	res, err := a.call(t.Context(), name, args, token)
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return res
}

// cancelByContext runs a long call and ends its context once its job
// runs: the job must end canceled. How the client tells the server
// (notifications/cancelled, or dropping the request) is the client's.
func cancelByContext(t *testing.T, f *interopFleet, a agent, how string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	called := make(chan error, 1)
	go func() {
		_, err := a.call(ctx, "run_code", map[string]any{"language": "python", "code": sleeper}, "")
		called <- err
	}()
	id := f.runningJob(t)
	cancel()
	if err := <-called; err == nil {
		t.Errorf("%s: the canceled call returned no error", how)
	}
	f.canceled(t, id, how)
}
