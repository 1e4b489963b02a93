package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// engine is a second Docker engine on this machine, started by a test: a
// dockerd with its own socket, data root, exec root and pid file, and no
// bridge or iptables (sandboxes have no network). For the fleet it is a
// second host.
type engine struct {
	dir    string // holds everything the daemon writes
	sock   string
	driver string // storage driver, the main engine's
	logs   *testutil.Buffer
	cmd    *exec.Cmd
	done   chan struct{}
}

// host is the engine's DOCKER_HOST.
func (e *engine) host() string { return "unix://" + e.sock }

// startEngine starts a second dockerd and waits until it answers. An error
// means this machine cannot run one (not root, no dockerd, ...).
func startEngine(dir, driver string) (*engine, error) {
	e := &engine{dir: dir, sock: filepath.Join(dir, "docker.sock"), driver: driver, logs: &testutil.Buffer{}}
	return e, e.start()
}

func (e *engine) start() error {
	if err := os.WriteFile(filepath.Join(e.dir, "daemon.json"), []byte("{}\n"), 0o600); err != nil {
		return err
	}
	args := []string{
		"--config-file", filepath.Join(e.dir, "daemon.json"), // not /etc/docker/daemon.json: it names the main engine's data root
		"--host", e.host(),
		"--data-root", filepath.Join(e.dir, "data"),
		"--exec-root", filepath.Join(e.dir, "exec"),
		"--pidfile", filepath.Join(e.dir, "docker.pid"),
		"--bridge", "none", "--iptables=false", "--ip-masq=false",
		"--log-level", "warn",
	}
	if e.driver != "" {
		args = append(args, "--storage-driver", e.driver)
	}
	// In a network namespace of its own: a dockerd started with --bridge
	// none deletes a "docker0" it finds, and the host's belongs to the
	// main engine. The socket is a file, reachable from any namespace, and
	// sandboxes have no network.
	e.cmd = exec.Command("unshare", append([]string{"--net", "--", "dockerd"}, args...)...)
	e.cmd.Stdout, e.cmd.Stderr = e.logs, e.logs
	if err := e.cmd.Start(); err != nil {
		return fmt.Errorf("start dockerd: %w", err)
	}
	e.done = make(chan struct{})
	go func() {
		_ = e.cmd.Wait()
		close(e.done)
	}()
	err := testutil.Poll(context.Background(), 60*time.Second, 200*time.Millisecond, func(ctx context.Context) error {
		select {
		case <-e.done:
			return errors.New("dockerd exited")
		default:
		}
		return exec.CommandContext(ctx, "docker", "--host", e.host(), "version").Run()
	})
	if err != nil {
		e.stop()
		return fmt.Errorf("second dockerd not up: %w; its log:\n%s", err, e.logs.String())
	}
	return nil
}

// kill SIGKILLs the daemon, as a crash would: its containers' shims live on
// until it is restarted.
func (e *engine) kill() {
	_ = e.cmd.Process.Signal(syscall.SIGKILL)
	<-e.done
}

// stop stops the daemon (SIGTERM: it stops its containers), or kills it
// after 30s.
func (e *engine) stop() {
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.done:
	case <-time.After(30 * time.Second):
		e.kill()
	}
}

// remove stops the daemon, ends what it left running under its directory
// (by process ID, found by that directory in their command lines), and
// removes the directory.
func (e *engine) remove(t *testing.T) {
	e.stop()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(cmdline), e.dir) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && pid != os.Getpid() {
			t.Logf("ending process %d the second engine left: %.120s", pid, strings.ReplaceAll(string(cmdline), "\x00", " "))
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if mounts, err := os.ReadFile("/proc/mounts"); err == nil {
		var under []string
		for line := range strings.Lines(string(mounts)) {
			if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], e.dir) {
				under = append(under, f[1])
			}
		}
		slices.Reverse(under) // the deepest first
		for _, m := range under {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	}
	if err := os.RemoveAll(e.dir); err != nil {
		t.Logf("remove %s: %v", e.dir, err)
	}
}

// needSecondEngine starts a second engine with the sandbox image loaded
// into it (docker save | docker load: no registry), removed when the test
// ends. Where one cannot be started the test is skipped, saying why, or
// failed under SANDFLEET_REQUIRE_DOCKER=1.
func needSecondEngine(t *testing.T) *engine {
	t.Helper()
	workertest.Sandbox(t, executor.Config{WorkerID: "probe"}) // the main engine and the image answer, or skip
	fail := func(format string, args ...any) {
		t.Helper()
		testutil.Unavailable(t, "needs a second Docker engine on this machine: %s", fmt.Sprintf(format, args...))
	}
	if os.Geteuid() != 0 {
		fail("starting dockerd needs root")
	}
	if _, err := exec.LookPath("dockerd"); err != nil {
		fail("no dockerd: %v", err)
	}
	out, err := exec.Command("docker", "info", "--format", "{{.Driver}}").Output()
	if err != nil {
		fail("docker info: %v", err)
	}
	// A short path: the daemon's sockets live under it (108 bytes at most).
	dir, err := os.MkdirTemp("", "sf-engine-")
	if err != nil {
		t.Fatal(err)
	}
	e, err := startEngine(dir, strings.TrimSpace(string(out)))
	t.Cleanup(func() { e.remove(t) })
	if err != nil {
		fail("%v", err)
	}
	start := time.Now()
	load := exec.Command("bash", "-o", "pipefail", "-c",
		fmt.Sprintf("docker save %s | docker --host %s load", executor.DefaultImage, e.host()))
	if out, err := load.CombinedOutput(); err != nil {
		t.Fatalf("load %s into the second engine: %v\n%s", executor.DefaultImage, err, out)
	}
	t.Logf("second engine up at %s, %s loaded in %s", e.sock, executor.DefaultImage, time.Since(start).Round(100*time.Millisecond))
	return e
}

// Two workers, each on its own Docker engine, 300 jobs. Mid-run the second
// engine's daemon is SIGKILLed: its worker reports not ready (/readyz
// 503), holds its jobs with their leases kept instead of burning
// deliveries, and the first engine goes on; the daemon is started again and
// the held jobs finish there. Every job has exactly one result (RESULTS was
// written 300 times), every one succeeded as attempt 1 (no delivery
// burnt), none was given up; where each ran is printed.
func TestTwoEngines(t *testing.T) {
	t.Parallel()
	const total = 300
	e2 := needSecondEngine(t)
	url, client, js := natsServer(t)
	addr1, addr2 := testutil.FreeAddr(t), testutil.FreeAddr(t)
	common := []string{"--slots", "3", "--pool", "2", "--ack-wait", "10s"}
	id1, id2 := uniqueID("eng1"), uniqueID("eng2")
	w1 := dockerWorker(t, url, id1, append(common, "--metrics", addr1)...)
	w2 := startProc(t, id2, append(common, "--nats", url, "--id", id2, "--log-format", "json", "--metrics", addr2), "DOCKER_HOST="+e2.host())
	for _, a := range []string{addr1, addr2} {
		testutil.Eventually(t, 60*time.Second, "worker ready at "+a, func() bool { code, _ := httpGet("http://" + a + "/readyz"); return code == 200 })
	}

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	watch, err := natstest.Stores(t, js).Results.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	start := time.Now()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < total; i += 4 {
				if _, err := client.Submit(ctx, &jobs.Job{ID: fmt.Sprintf("eng-%03d", i), Image: "shell", Code: fmt.Sprintf("echo job %d", i)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()

	results := map[string]*jobs.Result{}
	next := func() {
		t.Helper()
		select {
		case e := <-watch.Updates():
			if e == nil {
				return
			}
			r, err := jobs.DecodeStoredResult(e.Key(), e.Value())
			if err != nil {
				t.Fatal(err)
			}
			if results[r.ID] != nil {
				t.Errorf("%s: a second result", r.ID)
			}
			results[r.ID] = r
		case <-ctx.Done():
			t.Fatalf("%d results of %d within 5m", len(results), total)
		}
	}
	for len(results) < total/3 {
		next()
	}
	killedAt := time.Now()
	e2.kill()
	t.Logf("second engine's daemon SIGKILLed after %d results, %s in", len(results), killedAt.Sub(start).Round(time.Millisecond))
	notReady := false
	for !notReady && time.Since(killedAt) < time.Minute {
		code, _ := httpGet("http://" + addr2 + "/readyz")
		notReady = code == 503
		if !notReady && len(results) < total {
			next()
		}
	}
	if !notReady {
		t.Fatal("the second engine's worker never reported not ready")
	}
	_, held := httpGet("http://" + addr2 + "/metrics")
	t.Logf("second worker not ready %s after the kill; %s", time.Since(killedAt).Round(time.Millisecond), grepLine(held, "sandfleet_jobs_held "))
	// Some more results come from the first engine alone, then the daemon returns.
	for n := len(results) + total/6; len(results) < min(n, total); {
		next()
	}
	if err := e2.start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("second engine's daemon back %s after the kill, %d results by then", time.Since(killedAt).Round(time.Millisecond), len(results))
	testutil.Eventually(t, 60*time.Second, "second worker ready again", func() bool { code, _ := httpGet("http://" + addr2 + "/readyz"); return code == 200 })
	for len(results) < total {
		next()
	}
	elapsed := time.Since(start)

	where := map[string]int{}
	afterKill := map[string]int{}
	for id, r := range results {
		var i int
		_, _ = fmt.Sscanf(id, "eng-%d", &i)
		if r.Status != jobs.StatusSucceeded || r.Attempt != 1 || r.Stdout != fmt.Sprintf("job %d\n", i) {
			t.Errorf("%s: %s attempt %d stdout %q error %q, want succeeded as attempt 1", id, r.Status, r.Attempt, r.Stdout, r.Error)
		}
		where[r.Worker]++
		if r.FinishedAt != nil && r.FinishedAt.After(killedAt) {
			afterKill[r.Worker]++
		}
	}
	kv, err := js.Stream(ctx, "KV_"+fleet.ResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := kv.Info(ctx); err != nil || info.State.LastSeq != total {
		t.Errorf("RESULTS written %d times (%v), want %d: one result per job", info.State.LastSeq, err, total)
	}
	for _, a := range []string{addr1, addr2} {
		_, m := httpGet("http://" + a + "/metrics")
		if line := grepLine(m, "sandfleet_dead_letters_total "); line != "sandfleet_dead_letters_total 0" {
			t.Errorf("%s: %q, want no dead letter", a, line)
		}
	}
	t.Logf("%d jobs in %s; where they ran: %s %d (after the kill %d), %s %d (after the kill %d)", total, elapsed.Round(time.Millisecond),
		id1, where[id1], afterKill[id1], id2, where[id2], afterKill[id2])
	if where[id2] == 0 || where[id1] == 0 {
		t.Errorf("jobs per worker %v: want both engines used", where)
	}
	w1.signal(t, syscall.SIGTERM)
	w2.signal(t, syscall.SIGTERM)
	for _, w := range []*proc{w1, w2} {
		if code := w.exited(t, time.Minute); code != 0 {
			t.Errorf("worker exited %d", code)
		}
	}
}

// grepLine returns the first line of text that starts with prefix.
func grepLine(text, prefix string) string {
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, prefix) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}
