// Package testutil is what the tests of several packages share: polling
// with a deadline, the gate of tests that need Docker, and the path of the
// HumanEval data set, which is not part of the repository. The test doubles
// live beside it: fakeexec (an in-memory executor), natstest (in-process
// JetStream servers), workertest (a worker for the length of a test, a
// real sandbox executor) and archivetest (hostile and hand-built tars).
package testutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Poll calls f every interval until it returns nil or within has passed,
// and then returns f's last error joined with the deadline's. Each call
// gets a context of at most 5s, so that one hung call cannot eat the whole
// budget. It does not need a testing.TB, so a test's goroutine may use it.
func Poll(ctx context.Context, within, interval time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		actx, done := context.WithTimeout(ctx, 5*time.Second)
		err := f(actx)
		done()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-tick.C:
		}
	}
}

var errNotYet = errors.New("condition not met")

// Eventually polls cond every 10ms until it holds, and fails t, naming what
// it waited for, when within passes first.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	err := Poll(context.Background(), within, 10*time.Millisecond, func(context.Context) error {
		if cond() {
			return nil
		}
		return errNotYet
	})
	if err != nil {
		t.Fatalf("not within %s: %s", within, what)
	}
}

// FreeAddr returns a loopback address whose port was free a moment ago,
// for a server that the test starts on it.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// RequireDockerEnv names the variable that turns a test skipped for want of
// Docker into a failure: CI (.ci/run) sets it to 1.
const RequireDockerEnv = "SANDFLEET_REQUIRE_DOCKER"

// NeedDocker gates a test on Docker. Under -short it skips t. Otherwise it
// calls probe, which should fail when the engine or an image the test
// needs is missing, with a 30s deadline; when probe fails, t is skipped
// with probe's error, or failed when SANDFLEET_REQUIRE_DOCKER=1.
func NeedDocker(t testing.TB, probe func(context.Context) error) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Docker; skipped under -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := probe(ctx); err != nil {
		Unavailable(t, "needs Docker and its images (make sandbox-image images): %v", err)
	}
}

// Unavailable is the gate for what CI provides and a developer's machine
// may lack (Docker, an image, a second engine, a tool .ci/run installs):
// it skips t with the message, or fails t when SANDFLEET_REQUIRE_DOCKER=1.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(RequireDockerEnv) == "1" {
		t.Fatalf("%s=1: %s", RequireDockerEnv, msg)
	}
	t.Skipf("%s (%s=1 makes this a failure)", msg, RequireDockerEnv)
}

// HumanEvalEnv names the variable that points tests at HumanEval.jsonl.gz.
const HumanEvalEnv = "HUMANEVAL"

// HumanEval returns the path of HumanEval's problems (HumanEval.jsonl.gz),
// which the repository does not carry: $HUMANEVAL, else
// ../shared/data/humaneval/HumanEval.jsonl.gz beside the repository's root
// (where CI has it). When neither exists it skips t, saying where to get
// the file.
func HumanEval(t testing.TB) string {
	t.Helper()
	path := os.Getenv(HumanEvalEnv)
	if path == "" {
		root, err := RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		path = filepath.Join(root, "..", "shared", "data", "humaneval", "HumanEval.jsonl.gz")
	}
	if _, err := os.Stat(path); err != nil {
		t.Skipf("needs HumanEval, which the repository does not carry: %v; get data/HumanEval.jsonl.gz "+
			"from https://github.com/openai/human-eval and set %s=path/to/HumanEval.jsonl.gz", err, HumanEvalEnv)
	}
	return path
}

// RepoRoot returns the directory of the go.mod above the working directory
// (a test runs in its package's directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// BrowserEnv names the variable that points the browser tests at a
// Chromium binary other than the one on PATH.
const BrowserEnv = "SANDFLEET_CHROMIUM"

// NeedBrowser gates a test on a headless Chromium (Debian's chromium,
// which .ci/run installs) and returns its path: $SANDFLEET_CHROMIUM, else
// chromium or chromium-browser on PATH. Under -short it skips t; without a
// browser it skips t, or fails it when SANDFLEET_REQUIRE_DOCKER=1 (CI
// installs one).
func NeedBrowser(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a browser; skipped under -short")
	}
	if p := os.Getenv(BrowserEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("$%s: %v", BrowserEnv, err)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(RequireDockerEnv) == "1" {
		t.Fatalf("%s=1 but no chromium on PATH (apt-get install chromium, or set $%s)", RequireDockerEnv, BrowserEnv)
	}
	t.Skipf("needs a headless Chromium: none on PATH (apt-get install chromium, or set $%s; %s=1 makes this a failure)", BrowserEnv, RequireDockerEnv)
	return ""
}
