package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// Tests that run the real worker binary: signals, SIGKILL and restarts
// are only real in a real process. The binary is built once per test run.

// testHooksTag is the build tag that compiles the worker's test hooks in
// (testhook.go): the binary the fault tests run. The released build has no
// tag, and TestReleasedBuildIgnoresFakeExecutor proves the hook is gone.
const testHooksTag = "sandfleet_testhooks"

var (
	binMu     sync.Mutex
	binDir    string
	binByTags = map[string]string{} // build tags → path
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// workerBinary builds cmd/worker with its test hooks, once per test run.
func workerBinary(t *testing.T) string { return buildWorker(t, testHooksTag) }

// releasedBinary builds cmd/worker as make build does: no build tags.
func releasedBinary(t *testing.T) string { return buildWorker(t, "") }

// buildWorker builds cmd/worker with tags into a temporary directory, once
// per set of tags.
func buildWorker(t *testing.T, tags string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the worker binary; skipped under -short")
	}
	binMu.Lock()
	defer binMu.Unlock()
	if path, ok := binByTags[tags]; ok {
		return path
	}
	if binDir == "" {
		dir, err := os.MkdirTemp("", "sandfleet-worker-bin-")
		if err != nil {
			t.Fatal(err)
		}
		binDir = dir
	}
	path := filepath.Join(binDir, "worker-released")
	args := []string{"build", "-o", path}
	if tags != "" {
		path = filepath.Join(binDir, "worker-"+tags)
		args = []string{"build", "-tags", tags, "-o", path}
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	binByTags[tags] = path
	return path
}

// proc is a worker process.
type proc struct {
	cmd     *exec.Cmd
	logs    *testutil.Buffer
	done    chan struct{}
	waitErr error
}

// startProc starts the binary with args and extra environment. It is
// SIGKILLed at the end of the test if still running; its logs are printed
// when the test fails.
func startProc(t *testing.T, name string, args []string, env ...string) *proc {
	t.Helper()
	return startBinary(t, workerBinary(t), name, args, env...)
}

// startBinary is startProc for the worker binary at bin.
func startBinary(t *testing.T, bin, name string, args []string, env ...string) *proc {
	t.Helper()
	return startBinaryIn(t, "", bin, name, args, env...)
}

// startBinaryIn is startBinary in the working directory dir ("" for the
// test's).
func startBinaryIn(t *testing.T, dir, bin, name string, args []string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	p := &proc{cmd: cmd, logs: &testutil.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		<-p.done
		if t.Failed() {
			t.Logf("logs of %s:\n%s", name, p.logs.String())
		}
	})
	return p
}

func (p *proc) signal(t *testing.T, s syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
}

// kill SIGKILLs the process and waits for it to be gone.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// exited waits up to d for the process to exit and returns its exit code.
func (p *proc) exited(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("worker still running after %s", d)
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		return ee.ExitCode()
	}
	if p.waitErr != nil {
		t.Fatal(p.waitErr)
	}
	return 0
}

// natsServer starts an in-process JetStream server for the worker
// processes and returns its URL and a connected client.
func natsServer(t *testing.T) (string, *jobs.Client, jetstream.JetStream) {
	t.Helper()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	c, err := jobs.NewClient(t.Context(), js, jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return srv.ClientURL(), c, js
}

// httpGet returns the status code and body of a GET, or 0 on error.
func httpGet(url string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// executions reads a fake executor's log: job ID → runs.
func executions(t *testing.T, path string) (map[string]int, int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	runs := map[string]int{}
	total := 0
	for line := range strings.Lines(string(data)) {
		if id := strings.TrimSpace(line); id != "" {
			runs[id]++
			total++
		}
	}
	return runs, total
}

// resultCount returns how many results RESULTS holds, or -1 when it
// cannot be read.
func resultCount(ctx context.Context, js jetstream.JetStream) int {
	kv, err := js.KeyValue(ctx, fleet.ResultsBucket)
	if err != nil {
		return -1
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return -1
	}
	return int(st.Values())
}

// echoed checks that the job whose code printed its own ID succeeded
// saying so, and returns its result, or nil when there is none.
func echoed(t *testing.T, ctx context.Context, client *jobs.Client, id string) *jobs.Result {
	t.Helper()
	res, err := client.Get(ctx, id)
	if err != nil {
		t.Errorf("%s: %v", id, err)
		return nil
	}
	if res.Status != jobs.StatusSucceeded || res.Stdout != id+"\n" {
		t.Errorf("%s: %+v", id, res)
	}
	return res
}

// assertDeliveries checks that the default queue's consumer delivered
// exactly as often as the results' attempts add up to: no delivery was
// taken and not run, none lost to a lease running out unseen.
func assertDeliveries(t *testing.T, ctx context.Context, js jetstream.JetStream, attempts int) {
	t.Helper()
	cons, err := js.Consumer(ctx, fleet.StreamName, fleet.ConsumerName(jobs.DefaultQueue))
	if err != nil {
		t.Fatal(err)
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ci.Delivered.Consumer != uint64(attempts) {
		t.Errorf("the consumer delivered %d times, the results' attempts add up to %d", ci.Delivered.Consumer, attempts)
	}
}

// waitJobsDrained waits until stream JOBS holds no job: every job was
// acknowledged.
func waitJobsDrained(t *testing.T, ctx context.Context, client *jobs.Client) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, "stream JOBS empty", func() bool {
		st, err := client.Status(ctx)
		return err == nil && st.Messages == 0
	})
}

// assertResultWrites checks that RESULTS was written exactly n times and
// holds n results: each result write is one message of the bucket's
// stream, so exactly n writes means no ID was written twice. It returns
// how many results it holds.
func assertResultWrites(t *testing.T, ctx context.Context, js jetstream.JetStream, n uint64) uint64 {
	t.Helper()
	kvStream, err := js.Stream(ctx, "KV_"+fleet.ResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := kvStream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != n || info.State.LastSeq != n {
		t.Errorf("RESULTS holds %d results after %d writes, want %d and %d", info.State.Msgs, info.State.LastSeq, n, n)
	}
	return info.State.Msgs
}
