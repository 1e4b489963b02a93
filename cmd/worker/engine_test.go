package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/tools/daemonjson/daemonjson"
)

// wedgedEngine is a Docker daemon that takes connections and never
// answers, as dockerd does once a container is wedged inside it: every
// request waits until its client gives up (or the test ends). It records
// how long each request was waited for before the client gave up.
type wedgedEngine struct {
	mu        sync.Mutex
	abandoned map[string][]time.Duration // path → how long each request waited
}

func startWedgedEngine(t *testing.T) (*wedgedEngine, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "docker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	e := &wedgedEngine{abandoned: map[string][]time.Duration{}}
	release := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		start := time.Now()
		select {
		case <-r.Context().Done():
		case <-release:
			return
		}
		// The API version prefix is not part of what a test asks about.
		path := r.URL.Path
		if i := strings.Index(path[1:], "/"); strings.HasPrefix(path, "/v") && i > 0 {
			path = path[i+1:]
		}
		e.mu.Lock()
		e.abandoned[r.Method+" "+path] = append(e.abandoned[r.Method+" "+path], time.Since(start))
		e.mu.Unlock()
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		close(release)
		_ = srv.Close()
	})
	return e, "unix://" + sock
}

func (e *wedgedEngine) waited(call string) []time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]time.Duration(nil), e.abandoned[call]...)
}

// A wedged engine (every call hangs) does not hang the worker: NATS and
// /healthz come up at once, /readyz and the heartbeat say not ready and
// why, the ping is abandoned at its deadline (5 s) and the reaper's list at
// its own (15 s), nothing is fetched, and the worker stops promptly.
func TestWedgedEngine(t *testing.T) {
	t.Parallel()
	engine, host := startWedgedEngine(t)
	cli, err := client.New(client.WithHost(host), client.WithAPIVersion("1.41"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := executor.New(executor.Config{Client: cli, WorkerID: "wedged"})
	if err != nil {
		t.Fatal(err)
	}
	d := executor.StartService(e)

	started := time.Now()
	metrics := testutil.FreeAddr(t)
	s := startServe(t, []string{"--embedded", "--listen", "127.0.0.1:-1", "--data-dir", t.TempDir(), "--metrics", metrics,
		"--id", "wedged", "--pool", "0"}, d)
	testutil.Eventually(t, 10*time.Second, "/healthz", func() bool { c, _ := httpGet("http://" + metrics + "/healthz"); return c == 200 })
	if up := time.Since(started); up > 5*time.Second {
		t.Errorf("NATS and /healthz took %s: start-up waited on the engine", up)
	}
	if c, body := httpGet("http://" + metrics + "/readyz"); c != 503 {
		t.Errorf("/readyz = %d %q, want 503", c, body)
	}

	c := connect(t, s.url)
	if _, err := c.Submit(t.Context(), &jobs.Job{ID: "waits", Image: "python", Code: "print(1)"}); err != nil {
		t.Fatal(err)
	}
	const pingDeadline = "docker ping: no answer from the Docker engine within 5s"
	testutil.Eventually(t, 20*time.Second, "/status says the ping was abandoned", func() bool {
		st, ok := status(t, metrics)
		return ok && !st.Ready && strings.Contains(st.LastError, pingDeadline)
	})
	t.Logf("not ready, saying why, %s after the start", time.Since(started).Round(time.Millisecond))
	if c, body := httpGet("http://" + metrics + "/readyz"); c != 503 || !strings.Contains(body, pingDeadline) {
		t.Errorf("/readyz = %d %q, want 503 saying why", c, body)
	}
	testutil.Eventually(t, 10*time.Second, "the heartbeat says why", func() bool {
		st, err := c.Status(t.Context())
		return err == nil && len(st.Workers) == 1 && !st.Workers[0].Ready && strings.Contains(st.Workers[0].LastError, pingDeadline)
	})

	// Each call was abandoned at its own deadline (and the client gave up
	// then: the engine saw the request end).
	testutil.Eventually(t, 30*time.Second, "the reaper's list abandoned", func() bool { return len(engine.waited("GET /containers/json")) > 0 })
	for call, deadline := range map[string]time.Duration{"HEAD /_ping": 5 * time.Second, "GET /containers/json": 15 * time.Second} {
		if len(engine.waited(call)) == 0 {
			t.Errorf("the engine saw no %s given up", call)
		}
		for _, w := range engine.waited(call) {
			if w < deadline-100*time.Millisecond || w > deadline+2*time.Second {
				t.Errorf("%s abandoned after %s, want its deadline %s", call, w.Round(time.Millisecond), deadline)
			}
		}
		t.Logf("%s abandoned after %v", call, engine.waited(call))
	}
	if q, err := c.Pending(t.Context(), "waits"); !q || err != nil {
		t.Errorf("the job was taken while the engine is wedged: queued %v %v", q, err)
	}

	stopping := time.Now()
	s.Stop(t)
	if err := d.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if took := time.Since(stopping); took > 10*time.Second {
		t.Errorf("stopping took %s", took)
	}
}

// testRuntime is a Docker runtime registered for one test: a script that
// fails every container create (as runsc without --network=none does)
// until fix, and is runc from then on.
type testRuntime struct {
	name, dir string
}

// registerTestRuntime registers a test runtime with the local dockerd
// (daemon.json, then SIGHUP), fixed, and unregisters it at the end of the
// test. Without a local dockerd whose daemon.json it can write, it skips,
// or fails under SANDFLEET_REQUIRE_DOCKER=1.
func registerTestRuntime(t *testing.T) *testRuntime {
	t.Helper()
	const file = "/etc/docker/daemon.json"
	unable := func(format string, args ...any) {
		t.Helper()
		testutil.Unavailable(t, "needs a local dockerd whose %s this test may edit (it registers a runtime, then removes it): %s",
			file, fmt.Sprintf(format, args...))
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		unable("no runc on PATH: %v", err)
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" && !strings.HasPrefix(h, "unix://") {
		unable("DOCKER_HOST=%s is not local", h)
	}
	pid := dockerdPID()
	if pid == 0 {
		unable("no dockerd process here")
	}
	if f, err := os.OpenFile(file, os.O_RDWR, 0); err != nil {
		unable("%v", err)
	} else {
		f.Close()
	}

	rt := &testRuntime{name: uniqueID("sandfleet-test-rt"), dir: t.TempDir()}
	if err := os.Chmod(rt.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The error goes to the log file the engine reads the runtime's last
	// error from (--log), so that Docker reports it as runc's would be.
	script := `#!/bin/sh
if [ ! -e ` + rt.dir + `/fixed ]; then
	log= prev=
	for a in "$@"; do
		[ "$prev" = --log ] && log=$a
		prev=$a
		if [ "$a" = create ]; then
			msg="sandfleet test runtime: broken on purpose"
			[ -n "$log" ] && printf '{"level":"error","msg":"%s","time":"2024-01-01T00:00:00Z"}\n' "$msg" >>"$log"
			echo "$msg" >&2
			exit 1
		fi
	done
fi
exec ` + runc + ` "$@"
`
	if err := os.WriteFile(filepath.Join(rt.dir, "runtime"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	rt.fix()

	lock := lockDaemonJSON(t)
	_, err = daemonjson.Register(file, rt.name, filepath.Join(rt.dir, "runtime"), nil)
	lock()
	if err != nil {
		unable("%v", err)
	}
	t.Cleanup(func() {
		unlock := lockDaemonJSON(t)
		_, err := daemonjson.Unregister(file, rt.name)
		unlock()
		if err != nil {
			t.Errorf("unregister the test runtime %s from %s: %v", rt.name, file, err)
			return
		}
		reloadDockerd(t, rt.name, false)
	})
	reloadDockerd(t, rt.name, true)
	return rt
}

// breakIt makes every create fail from now on; fix undoes it.
func (rt *testRuntime) breakIt() {
	_ = os.Remove(filepath.Join(rt.dir, "fixed"))
}

func (rt *testRuntime) fix() {
	_ = os.WriteFile(filepath.Join(rt.dir, "fixed"), nil, 0o644)
}

// lockDaemonJSON serialises edits of daemon.json by tests running at once.
func lockDaemonJSON(t *testing.T) (unlock func()) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "sandfleet-test-daemon-json.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return func() { f.Close() }
}

// dockerdPID returns the PID of the engine the docker CLI talks to, whose
// daemon.json the tests edit: the one its default pid file names, not the
// first dockerd in /proc (TestTwoEngines runs a second one at the same
// time, and /proc lists PIDs in the order of their names: a SIGHUP sent to
// that one reloaded nothing, and the wait for the runtime timed out).
func dockerdPID() int {
	isDockerd := func(pid string) bool {
		comm, err := os.ReadFile("/proc/" + pid + "/comm")
		return err == nil && strings.TrimSpace(string(comm)) == "dockerd"
	}
	if b, err := os.ReadFile("/var/run/docker.pid"); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && isDockerd(strconv.Itoa(pid)) {
			return pid
		}
	}
	// No pid file: the dockerd started without --pidfile of its own.
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || !isDockerd(d.Name()) {
			continue
		}
		if cmdline, err := os.ReadFile("/proc/" + d.Name() + "/cmdline"); err == nil && !strings.Contains(string(cmdline), "--pidfile") {
			return pid
		}
	}
	return 0
}

// reloadDockerd has dockerd re-read daemon.json and waits until runtime
// name is (or is no longer) among its runtimes.
func reloadDockerd(t *testing.T, name string, present bool) {
	t.Helper()
	pid := dockerdPID()
	if pid == 0 {
		t.Fatal("no dockerd to reload") // kill(0) would signal the test's own group
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatalf("SIGHUP dockerd: %v", err)
	}
	testutil.Eventually(t, 90*time.Second, fmt.Sprintf("dockerd to reload its runtimes (%s present: %v)", name, present), func() bool {
		out, err := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").Output()
		return err == nil && strings.Contains(string(out), `"`+name+`"`) == present
	})
}

// creations returns the times of the containers created for worker id
// between since and until, from the engine's event log.
func creations(t *testing.T, id string, since, until time.Time) []time.Time {
	t.Helper()
	stamp := func(tm time.Time) string { return fmt.Sprintf("%d.%09d", tm.Unix(), tm.Nanosecond()) }
	out, err := exec.Command("docker", "events", "--since", stamp(since), "--until", stamp(until),
		"--filter", "type=container", "--filter", "event=create", "--filter", "label="+executor.LabelWorker+"="+id,
		"--format", "{{.TimeNano}}").Output()
	if err != nil {
		t.Fatalf("docker events: %v", err)
	}
	var times []time.Time
	for _, f := range strings.Fields(string(out)) {
		ns, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatalf("docker events: %q", f)
		}
		times = append(times, time.Unix(0, ns))
	}
	return times
}

// metric returns the value of a metric without labels on /metrics.
func metric(addr, name string) float64 {
	_, body := httpGet("http://" + addr + "/metrics")
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return -1
}

// A runtime that fails every start, on the real engine, with one held job
// and --pool 2: over 60 s the worker makes at most 6 containers (the cap;
// the back-off allows 5: at 0, 2, 6, 14 and 30 s), removes each, reports
// not ready with the engine's error on /readyz, /status and the heartbeat,
// and its pool stops refilling. Once the runtime works again, it serves
// within one back-off step (at most 30 s), and the held job succeeds as
// attempt 1.
func TestBinaryFailingRuntimeDocker(t *testing.T) {
	t.Parallel()
	workertest.Sandbox(t, executor.Config{WorkerID: "probe"}) // Docker and the image answer, or skip
	rt := registerTestRuntime(t)
	url, c, _ := natsServer(t)
	id := uniqueID("badrt")
	metrics := testutil.FreeAddr(t)
	w := dockerWorker(t, url, id, "--runtime", rt.name, "--pool", "2", "--metrics", metrics)
	testutil.Eventually(t, 90*time.Second, "ready with 2 warm sandboxes", func() bool {
		code, _ := httpGet("http://" + metrics + "/readyz")
		return code == 200 && metric(metrics, "sandfleet_pool_idle") == 2
	})

	rt.breakIt()
	broke := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	// A warm sandbox started before the fault takes this job; launching
	// its successor fails, and the pool stops refilling.
	res, err := c.SubmitAndWait(ctx, &jobs.Job{ID: "warm", Image: "python", Code: "print('warm')"})
	if err != nil || res.Status != jobs.StatusSucceeded {
		t.Fatalf("job on a warm sandbox: %v %+v", err, res)
	}
	// Limits of its own: no warm sandbox fits, a fresh one cannot start.
	if _, err := c.Submit(ctx, &jobs.Job{ID: "held", Image: "python", Code: "print('held')",
		Limits: limits.Limits{Memory: 256 * limits.MiB}}); err != nil {
		t.Fatal(err)
	}
	want := "runtime " + rt.name + ": cannot start sandboxes: "
	testutil.Eventually(t, 60*time.Second, "/readyz not ready with the engine's error", func() bool {
		code, body := httpGet("http://" + metrics + "/readyz")
		return code == 503 && strings.Contains(body, want) && strings.Contains(body, "broken on purpose")
	})
	testutil.Eventually(t, 60*time.Second, "the job held", func() bool { return metric(metrics, "sandfleet_jobs_held") == 1 })

	// Sixty seconds of the fault.
	for time.Since(broke) < 60*time.Second {
		time.Sleep(time.Second) // the fault's duration is what is under test
	}
	window := creations(t, id, broke, broke.Add(60*time.Second))
	var at []string
	for _, tm := range window {
		at = append(at, tm.Sub(broke).Round(100*time.Millisecond).String())
	}
	t.Logf("containers created in the 60 s after the runtime broke: %d, at %v", len(window), at)
	if len(window) > 6 {
		t.Errorf("%d containers created in 60 s of failing starts, want at most 6", len(window))
	}
	testutil.Eventually(t, 30*time.Second, "no container left but the warm one", func() bool {
		ids := containers(t, executor.LabelWorker+"="+id)
		return len(ids) == 1
	})
	if st, ok := status(t, metrics); !ok || st.Ready || !strings.Contains(st.LastError, want) {
		t.Errorf("/status %+v, want not ready with %q", st, want)
	}
	if st, err := c.Status(ctx); err != nil || len(st.Workers) != 1 || st.Workers[0].Ready || !strings.Contains(st.Workers[0].LastError, want) {
		t.Errorf("heartbeat %+v %v, want not ready with %q", st, err, want)
	}
	if halted, idle, failures := metric(metrics, "sandfleet_pool_halted"), metric(metrics, "sandfleet_pool_idle"),
		metric(metrics, "sandfleet_pool_launch_failures_total"); halted != 1 || idle != 1 || failures > 1 {
		t.Errorf("pool halted %v idle %v launch failures %v, want 1, 1 and at most 1: it stops refilling", halted, idle, failures)
	}
	if _, err := c.Get(ctx, "held"); err == nil {
		t.Error("the held job has a result while sandboxes cannot start")
	}

	rt.fix()
	fixed := time.Now()
	testutil.Eventually(t, 90*time.Second, "ready again", func() bool { code, _ := httpGet("http://" + metrics + "/readyz"); return code == 200 })
	recovered := time.Since(fixed)
	res, err = c.Wait(ctx, "held")
	if err != nil || res.Status != jobs.StatusSucceeded || res.Stdout != "held\n" || res.Attempt != 1 || res.Worker != id {
		t.Fatalf("held job after the fix: %v %+v", err, res)
	}
	t.Logf("ready %s after the fix; the held job succeeded %s after it, attempt %d",
		recovered.Round(time.Millisecond), time.Since(fixed).Round(time.Millisecond), res.Attempt)
	if recovered > 45*time.Second {
		t.Errorf("ready %s after the fix; one back-off step is at most 30 s (33 s with jitter)", recovered)
	}
	testutil.Eventually(t, 60*time.Second, "the pool refilled", func() bool {
		return metric(metrics, "sandfleet_pool_idle") == 2 && metric(metrics, "sandfleet_pool_halted") == 0
	})

	w.signal(t, syscall.SIGTERM)
	if code := w.exited(t, 60*time.Second); code != 0 {
		t.Errorf("worker exited %d", code)
	}
	logs := w.logs.String()
	for _, msg := range []string{"sandboxes do not start; backing off", "warm pool: not refilling while sandboxes do not start", "sandboxes start again"} {
		if !strings.Contains(logs, msg) {
			t.Errorf("not logged: %q", msg)
		}
	}
}
