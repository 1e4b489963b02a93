package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
)

// pythonSandbox is the sandbox executor of real Docker that the tests of
// sessions serve on: its python preset on the test's image
// (SANDFLEET_TEST_IMAGE, else the default, so a branch can test its own
// launcher), under workerID. It skips the test without Docker or the
// image.
func pythonSandbox(t *testing.T, workerID string) *executor.Executor {
	t.Helper()
	cfg := executor.Config{WorkerID: workerID}
	if img := os.Getenv("SANDFLEET_TEST_IMAGE"); img != "" {
		cfg.Presets = map[string]executor.Preset{"python": {Image: img, MainFile: "main.py", Argv: []string{"python3", "main.py"}}}
	}
	return workertest.Sandbox(t, cfg)
}

// runID is a name unique to this run of the tests, for the worker IDs
// that label a test's containers.
func runID(prefix string) string {
	return prefix + "-" + fmt.Sprint(time.Now().UnixNano()%1e6)
}

// apiWorker is a worker served in-process (serve, as Run does) with its
// embedded NATS server and the HTTP API on a free address; it stops when
// the test ends.
type apiWorker struct {
	*started
	addr string   // the API's host:port
	api  httpCall // calls to it
}

// startAPIWorker starts an apiWorker of --id id on exec; flags are added
// to the command line (--slots, --sessions, --metrics ...).
func startAPIWorker(t *testing.T, exec worker.Executor, id string, flags ...string) *apiWorker {
	t.Helper()
	addr := testutil.FreeAddr(t)
	args := append([]string{"--embedded", "--listen", "127.0.0.1:-1", "--data-dir", t.TempDir(), "--id", id, "--http", addr}, flags...)
	w := &apiWorker{started: startServe(t, args, exec), addr: addr, api: httpCall{t, "http://" + addr}}
	t.Cleanup(func() { w.Stop(t) })
	return w
}

// sessionsUp waits for the API to answer on /v1/sessions: the session
// host is set up beside the jobs, after serve is ready.
func (w *apiWorker) sessionsUp(t *testing.T) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, "the API up", func() bool {
		res, err := http.Get(w.api.base + "/v1/sessions")
		if err == nil {
			res.Body.Close()
		}
		return err == nil && res.StatusCode == 200
	})
}

// writeConfig writes a worker's --config file of these presets alone and
// returns its path.
func writeConfig(t *testing.T, presets map[string]executor.Preset) string {
	t.Helper()
	data, err := json.Marshal(map[string]any{"presets": presets})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "worker.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// dockerPS lists the IDs of the containers with these labels (key=value):
// running ones with flags "-q", all with "-aq".
func dockerPS(t *testing.T, flags string, labels []string) []string {
	t.Helper()
	args := []string{"ps", flags, "--no-trunc"}
	for _, l := range labels {
		args = append(args, "--filter", "label="+l)
	}
	out, err := exec.Command("docker", args...).Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	return strings.Fields(string(out))
}
