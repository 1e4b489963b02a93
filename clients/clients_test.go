// Package clients_test checks the Python and TypeScript clients: their
// own unit tests, the offline install and the build, and the seed's
// examples run against a real gateway and worker on real Docker.
package clients_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/sandfleet/sandfleet/internal/natsembed"
	"github.com/sandfleet/sandfleet/internal/testutil"
)

// need skips t when a tool is missing (python3, node, tsc), or fails it
// under SANDFLEET_REQUIRE_DOCKER=1, as CI runs: .ci/run installs them.
func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Unavailable(t, "%s is not installed (.ci/run installs it)", tool)
		}
	}
}

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, out.String(), stderr.String())
	}
	return out.String()
}

func TestPythonUnit(t *testing.T) {
	t.Parallel()
	need(t, "python3")
	run(t, "python", nil, "python3", "-m", "unittest", "discover", "-s", "tests")
}

// pip install ./clients/python works with no index at all.
func TestPythonInstallOffline(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("creates a virtualenv")
	}
	need(t, "python3")
	venv := filepath.Join(t.TempDir(), "venv")
	run(t, ".", nil, "python3", "-m", "venv", venv)
	abs, _ := filepath.Abs("python")
	run(t, t.TempDir(), []string{"PIP_NO_INDEX=1", "PIP_FIND_LINKS="}, filepath.Join(venv, "bin", "pip"), "install", "--no-index", abs)
	out := run(t, t.TempDir(), nil, filepath.Join(venv, "bin", "python"), "-c",
		"import sandfleet, sys; print(sandfleet.__version__, sandfleet.__file__.startswith(sys.prefix))")
	if strings.TrimSpace(out) != "0.1.0 True" {
		t.Errorf("installed: %q", out)
	}
}

// dist/ is what tsc makes of src/, and the unit tests pass on it.
func TestTypeScript(t *testing.T) {
	t.Parallel()
	need(t, "tsc", "node")
	out := t.TempDir()
	run(t, "typescript", nil, "tsc", "-p", ".", "--outDir", out)
	for _, f := range []string{"index.js", "index.d.ts"} {
		want, _ := os.ReadFile(filepath.Join(out, f))
		got, _ := os.ReadFile(filepath.Join("typescript", "dist", f))
		if !bytes.Equal(got, want) {
			t.Errorf("typescript/dist/%s is not what tsc makes of src/: run tsc -p clients/typescript", f)
		}
	}
	run(t, "typescript", nil, "node", "--test", "test/")
}

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// binaries builds cmd/worker and cmd/gateway, once.
func binaries(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "sandfleet-clients-bin-")
		if binErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+"/", "../cmd/worker", "../cmd/gateway")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// start runs a binary until the test ends (SIGINT, then its exit).
func start(t *testing.T, name string, args ...string) *testutil.Buffer {
	t.Helper()
	log := &testutil.Buffer{}
	cmd := exec.Command(filepath.Join(binaries(t), name), args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, log.String())
		}
	})
	return log
}

// TestSeedExamplesOnDocker runs the seed's Python usage example and its
// TypeScript DockerSandbox, only their imports changed, against a gateway
// process and a worker process on real Docker.
func TestSeedExamplesOnDocker(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the worker and the gateway on real Docker")
	}
	need(t, "python3", "node")
	testutil.NeedDocker(t, func(ctx context.Context) error {
		exec, err := executor.New(executor.Config{WorkerID: "clients-check"})
		if err != nil {
			return err
		}
		defer exec.Close()
		return exec.Check(ctx)
	})

	natsAddr, httpAddr := testutil.FreeAddr(t), testutil.FreeAddr(t)
	// The embedded server's credentials, made before the worker starts
	// (it uses them as they are) so that the gateway has them at once.
	dataDir := t.TempDir()
	_, user, password, err := natsembed.Credentials(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	start(t, "worker", "--embedded", "--listen", natsAddr, "--data-dir", dataDir, "--http", "",
		"--slots", "2", "--pool", "1", "--id", "clients-e2e")
	secret, line, err := gateway.NewToken("seed-example", nil)
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gwLog := start(t, "gateway", "--nats", "nats://"+user+":"+password+"@"+natsAddr, "--listen", httpAddr, "--tokens", tokens)
	url := "http://" + httpAddr
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway not ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	env := []string{"SANDFLEET_URL=" + url, "SANDFLEET_TOKEN=" + secret}

	type seedResult struct {
		Success  bool   `json:"success"`
		Output   string `json:"output"`
		ExitCode int    `json:"exit_code"`
		ExitTS   *int   `json:"exitCode"`
	}
	lines := func(out string) []seedResult {
		var rs []seedResult
		for l := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
			var r seedResult
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			if r.ExitTS != nil { // TypeScript's exitCode
				r.ExitCode, r.ExitTS = *r.ExitTS, nil
			}
			rs = append(rs, r)
		}
		return rs
	}
	hello := seedResult{Success: true, Output: "Hello from the sandbox!\n/workspace\n", ExitCode: 0}

	t.Run("python", func(t *testing.T) {
		py := lines(run(t, "python", append(env, "PYTHONPATH=."), "python3", "examples/seed.py"))
		if len(py) != 3 {
			t.Fatalf("%d results, want 3: %+v", len(py), py)
		}
		if py[0] != hello {
			t.Errorf("seed example: %+v, want %+v", py[0], hello)
		}
		if want := (seedResult{Success: false, Output: "bye\n", ExitCode: 3}); py[1] != want {
			t.Errorf("exit 3: %+v, want %+v", py[1], want)
		}
		if py[2].Success || py[2].ExitCode != 124 || !strings.Contains(py[2].Output, "[sandfleet] timeout") {
			t.Errorf("endless loop with timeout=2: %+v, want exit 124 and a timeout", py[2])
		}
	})
	t.Run("python workspace and artifacts", func(t *testing.T) {
		out := run(t, "python", append(env, "PYTHONPATH=."), "python3", "examples/agent.py")
		var got struct {
			Steps        []string `json:"steps"`
			Stdout       string   `json:"stdout"`
			Artifacts    []string `json:"artifacts"`
			PNGSignature bool     `json:"png_signature"`
			Revision     int      `json:"revision"`
			Snapshot     []string `json:"snapshot"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); err != nil {
			t.Fatalf("output %q: %v", out, err)
		}
		if !slices.Equal(got.Steps, []string{"succeeded", "succeeded"}) || got.Stdout != "2 rows\n" ||
			!slices.Equal(got.Artifacts, []string{"plots/plot.png"}) || !got.PNGSignature || got.Revision != 2 ||
			!slices.Equal(got.Snapshot, []string{"data.csv", "main.py", "plots/plot.png"}) {
			t.Errorf("agent session over HTTP: %+v", got)
		}
	})
	// The same loop in each client and each shape: the model's calls run
	// the same programs, and the results are equal but for the job's ID
	// and time, which each run has its own of.
	var loops []string
	for _, c := range []struct{ name, dir, cmd, example string }{
		{"python tool loop", "python", "python3", "examples/tool_loop.py"},
		{"typescript tool loop", "typescript", "node", "examples/tool_loop.mjs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := run(t, c.dir, append(env, "PYTHONPATH=."), c.cmd, c.example)
			var got struct {
				OpenAI struct {
					Answer  string
					Results []string
				} `json:"openai"`
				Anthropic struct {
					Answer  string
					Errors  []bool
					Results []string
				} `json:"anthropic"`
			}
			if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); err != nil {
				t.Fatalf("output %q: %v", out, err)
			}
			// Both shapes ran the same programs in sandboxes: the same answer,
			// the failing one an error result with its stderr.
			if got.OpenAI.Answer != "The sum is 45." || got.Anthropic.Answer != got.OpenAI.Answer ||
				!slices.Equal(got.Anthropic.Errors, []bool{false, true}) || len(got.OpenAI.Results) != 2 ||
				!strings.Contains(got.OpenAI.Results[1], "bad input") || !strings.Contains(got.Anthropic.Results[1], "bad input") {
				t.Errorf("tool loop: %s", out)
			}
			o, a := toolTexts(got.OpenAI.Results), toolTexts(got.Anthropic.Results)
			if !slices.Equal(o, a) {
				t.Errorf("the OpenAI shape's results %q, the Anthropic shape's %q: want the same", o, a)
			}
			loops = append(loops, strings.Join(o, "\n"))
		})
	}
	if len(loops) == 2 && loops[0] != loops[1] {
		t.Errorf("Python's results %q, TypeScript's %q: want the same", loops[0], loops[1])
	}
	t.Run("python session", func(t *testing.T) {
		out := run(t, "python", append(env, "PYTHONPATH=."), "python3", "examples/session.py")
		var got map[string]any
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); err != nil {
			t.Fatalf("output %q: %v", out, err)
		}
		want := map[string]any{"created": "running", "first_reset": true, "last_len": "12", "error": "IndexError",
			"after_error": "506", "command": "121", "exit_code": 5.0, "served": "hi from the session\n",
			"server_log": true, "read": "[0, 1, 4, 9, 16, 25, 36, 49, 64, 81, 100, 121]", "after_close": "gone"}
		for k, v := range want {
			if fmt.Sprint(got[k]) != fmt.Sprint(v) {
				t.Errorf("%s: %v, want %v", k, got[k], v)
			}
		}
		if n, _ := got["calls"].(float64); n < 30 {
			t.Errorf("%v calls, want at least 30", got["calls"])
		}
		if fmt.Sprint(got["processes"]) != "[true]" || !strings.Contains(fmt.Sprint(got["files"]), "rows.json") {
			t.Errorf("processes %v files %v", got["processes"], got["files"])
		}
	})
	t.Run("typescript session", func(t *testing.T) {
		out := run(t, "typescript", env, "node", "examples/session.mjs")
		var got map[string]any
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); err != nil {
			t.Fatalf("output %q: %v", out, err)
		}
		want := map[string]any{"created": "running", "first_reset": true, "last_len": "12", "error": "IndexError",
			"after_error": "506", "command": "121", "exit_code": 5.0, "served": "hi from the session\n",
			"server_log": true, "read": "[0, 1, 4, 9, 16, 25, 36, 49, 64, 81, 100, 121]", "after_close": "gone"}
		for k, v := range want {
			if fmt.Sprint(got[k]) != fmt.Sprint(v) {
				t.Errorf("%s: %v, want %v", k, got[k], v)
			}
		}
		if n, _ := got["calls"].(float64); n < 30 {
			t.Errorf("%v calls, want at least 30", got["calls"])
		}
		if fmt.Sprint(got["processes"]) != "[true]" || !strings.Contains(fmt.Sprint(got["files"]), "rows.json") {
			t.Errorf("processes %v files %v", got["processes"], got["files"])
		}
	})
	t.Run("typescript", func(t *testing.T) {
		out := run(t, "typescript", env, "node", "examples/seed.mjs")
		ls := strings.Split(strings.TrimSpace(out), "\n")
		if len(ls) != 3 {
			t.Fatalf("output %q", out)
		}
		ts := lines(strings.Join(ls[:2], "\n"))
		if ts[0] != hello {
			t.Errorf("seed execute: %+v, want %+v", ts[0], hello)
		}
		if ts[1].Success || ts[1].ExitCode != 3 || ts[1].Output != "bye\n" {
			t.Errorf("exit 3: %+v", ts[1])
		}
		if ls[2] != `{"status":"succeeded","stdout":"42 from stdin\n"}` {
			t.Errorf("Sandbox.run with files and stdin: %s", ls[2])
		}
	})
	if strings.Contains(gwLog.String(), secret) {
		t.Error("the gateway logged the token")
	}
}

// toolTexts are run_code's results without what differs from one run of
// the same call to the next: the job's ID and how long it ran
// ("status: failed (exit code 2) in 35ms, job ID" keeps "status: failed
// (exit code 2)").
func toolTexts(results []string) []string {
	var out []string
	for _, r := range results {
		first, rest, _ := strings.Cut(r, "\n")
		first, _, _ = strings.Cut(first, ", job ")
		if i := strings.LastIndex(first, " in "); i >= 0 {
			first = first[:i]
		}
		out = append(out, first+"\n"+rest)
	}
	return out
}
