package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
)

// dockerFleet starts an in-process JetStream server and a worker on real
// sandboxes, and returns the server's URL; without Docker and the sandbox
// image the test is skipped (workertest.Sandbox). SANDFLEET_TEST_IMAGE,
// when set, names the image of the default presets: a branch's own, while
// the shared tag holds another branch's launcher.
func dockerFleet(t *testing.T, id string) string {
	t.Helper()
	return dockerFleetOn(t, id, "")
}

// dockerFleetOn is dockerFleet with the sandboxes on OCI runtime rt ("":
// the engine's default, runc).
func dockerFleetOn(t *testing.T, id, rt string) string {
	t.Helper()
	cfg := executor.Config{WorkerID: id, Runtime: rt}
	if img := os.Getenv("SANDFLEET_TEST_IMAGE"); img != "" {
		cfg.Presets = executor.DefaultPresets()
		for n, p := range cfg.Presets {
			if p.Image == executor.DefaultImage {
				p.Image = img
				cfg.Presets[n] = p
			}
		}
	}
	exec := workertest.Sandbox(t, cfg)
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	workertest.Start(t, js, exec, worker.Config{ID: id, Slots: 2, FetchWait: 200 * time.Millisecond})
	return srv.ClientURL()
}

// arrivals is a writer that notes when each line arrives.
type arrivals struct {
	mu    sync.Mutex
	buf   strings.Builder
	lines []arrival
}

type arrival struct {
	line string
	at   time.Time
}

func (a *arrivals) Write(p []byte) (int, error) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.buf.Write(p)
	for {
		s := a.buf.String()
		line, rest, ok := strings.Cut(s, "\n")
		if !ok {
			break
		}
		a.lines = append(a.lines, arrival{line, now})
		a.buf.Reset()
		a.buf.WriteString(rest)
	}
	return len(p), nil
}

func (a *arrivals) get() []arrival {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.lines)
}

// The live output through `submit run` on real sandboxes: a job prints a
// line every 200 ms for 5 s, each line its own time of printing; each
// line's latency is its arrival on run's stdout less that time. The test
// logs the figures and asserts only that the first line came while the job
// still ran (within 3 s, a generous bound on a busy machine). `submit logs
// -f` started mid-job shows the earlier lines, then the rest; `submit
// logs` after the end replays them all; every one exits as the job, 3.
func TestLiveOutputDocker(t *testing.T) {
	t.Parallel()
	url := dockerFleet(t, fmt.Sprintf("live-docker-%d", os.Getpid()))
	const code = "import time, sys\n" +
		"for i in range(25):\n" +
		"    print(f'{i} {time.time():.6f}', flush=True)\n" +
		"    time.sleep(0.2)\n" +
		"sys.exit(3)\n"
	out := &arrivals{}
	var stderr liveBuffer
	done := make(chan int, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	go func() {
		done <- runCLI(ctx, []string{"run", "--id", "live-docker", "-c", code, "--nats", url}, strings.NewReader(""), out, &stderr)
	}()

	// logs -f from the middle of the job: the earlier lines, then the rest.
	testutil.Eventually(t, 2*time.Minute, "5 lines", func() bool { return len(out.get()) >= 5 })
	mid := &arrivals{}
	midDone := make(chan int, 1)
	go func() {
		midDone <- runCLI(ctx, []string{"logs", "-f", "live-docker", "--nats", url}, strings.NewReader(""), mid, io.Discard)
	}()
	if c := <-done; c != 3 {
		t.Fatalf("run exited %d (stderr %q), want 3", c, stderr.String())
	}
	if c := <-midDone; c != 3 {
		t.Errorf("logs -f exited %d, want 3", c)
	}

	lines := out.get()
	if len(lines) != 25 {
		t.Fatalf("run printed %d lines, want 25", len(lines))
	}
	var lat []time.Duration
	for i, a := range lines {
		n, ts, _ := strings.Cut(a.line, " ")
		printed, err := strconv.ParseFloat(ts, 64)
		if err != nil || n != strconv.Itoa(i) {
			t.Fatalf("line %d: %q", i, a.line)
		}
		lat = append(lat, a.at.Sub(time.Unix(0, int64(printed*1e9))))
	}
	sorted := slices.Clone(lat)
	slices.Sort(sorted)
	t.Logf("line latency, printed in the sandbox → on submit run's stdout: first %s; min %s, median %s, max %s over %d lines; job ran %s",
		lat[0].Round(time.Millisecond), sorted[0].Round(time.Millisecond), sorted[len(sorted)/2].Round(time.Millisecond),
		sorted[len(sorted)-1].Round(time.Millisecond), len(lat), lines[len(lines)-1].at.Sub(lines[0].at).Round(time.Millisecond))
	if lat[0] > 3*time.Second || !lines[0].at.Before(lines[len(lines)-1].at.Add(-3*time.Second)) {
		t.Errorf("the first line took %s; it came %s before the last", lat[0], lines[len(lines)-1].at.Sub(lines[0].at))
	}

	var midText, all strings.Builder
	for _, a := range mid.get() {
		midText.WriteString(a.line + "\n")
	}
	for _, a := range lines {
		all.WriteString(a.line + "\n")
	}
	if midText.String() != all.String() {
		t.Errorf("logs -f from mid-job printed\n%s\nwant\n%s", midText.String(), all.String())
	}
	if got := submit(t, url, "", "logs", "live-docker"); got.code != 3 || got.stdout != all.String() {
		t.Errorf("logs after the end: exit %d, stdout %q", got.code, got.stdout)
	}
}
