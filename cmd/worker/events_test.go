package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/procfs"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

func TestEventsFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want bool
	}{{nil, true}, {[]string{"--events=false"}, false}, {[]string{"--events"}, true}} {
		o, err := parseFlags(tc.args)
		if err != nil || o.events != tc.want {
			t.Errorf("parseFlags(%q): events %v, %v; want %v", tc.args, o.events, err, tc.want)
		}
	}
}

// collect follows a job's events in the background until its result.
func collect(t *testing.T, c *jobs.Client, id string) (<-chan *jobs.Event, <-chan error) {
	t.Helper()
	evs, errc := make(chan *jobs.Event, 1000), make(chan error, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	go func() {
		defer cancel()
		defer close(evs)
		for ev, err := range c.Follow(ctx, id) {
			if err != nil {
				errc <- err
				return
			}
			evs <- ev
		}
	}()
	return evs, errc
}

// describe is "type/attempt[:stream]" of each event, for messages.
func describe(evs []*jobs.Event) string {
	var parts []string
	for _, ev := range evs {
		s := fmt.Sprintf("%s/%d", ev.Type, ev.Attempt)
		if ev.Stream != "" {
			s += ":" + string(ev.Stream)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// The worker SIGKILLed mid-job, on real Docker: a watcher sees attempt 1's
// output, then redelivered, then attempt 2 from its start, then finished;
// the output of attempt 2 is whole, and so is the result.
func TestBinaryCrashEventsDocker(t *testing.T) {
	t.Parallel()
	workertest.Sandbox(t, executor.Config{WorkerID: "probe"}) // Docker and the image answer, or skip
	url, client, _ := natsServer(t)
	id := uniqueID("crash-events")
	args := []string{"--ack-wait", "2s", "--log-level", "debug"}
	w := dockerWorker(t, url, id, args...)

	const code = "import time\nfor i in range(15):\n    print(f'line {i}', flush=True)\n    time.sleep(0.2)\n"
	var want strings.Builder
	for i := range 15 {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if _, err := client.Submit(t.Context(), &jobs.Job{ID: "crash-watched", Image: "python", Code: code}); err != nil {
		t.Fatal(err)
	}
	evs, errc := collect(t, client, "crash-watched")
	var got []*jobs.Event
	lines := 0
	for lines < 3 {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatalf("follow ended early: %v (after %s)", <-errc, describe(got))
			}
			got = append(got, ev)
			if ev.Type == jobs.EventOutput {
				lines += strings.Count(string(ev.DataBytes()), "\n")
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("no 3 lines of output within 2m: %s", describe(got))
		}
	}
	w.kill()
	killed := time.Now()
	w = dockerWorker(t, url, id, args...)
	for ev := range evs {
		got = append(got, ev)
	}
	select {
	case err := <-errc:
		t.Fatalf("follow: %v (after %s)", err, describe(got))
	default:
	}
	t.Logf("%s; attempt 2 finished %s after the kill", describe(got), time.Since(killed).Round(time.Millisecond))

	// queued, started/1, output/1..., redelivered/2, started/2, output/2..., finished/2
	var seq []string
	out := map[int]string{}
	for _, ev := range got {
		step := fmt.Sprintf("%s/%d", ev.Type, ev.Attempt)
		if ev.Type == jobs.EventOutput {
			out[ev.Attempt] += string(ev.DataBytes())
			if seq[len(seq)-1] == step {
				continue
			}
		}
		seq = append(seq, step)
	}
	if s := strings.Join(seq, " "); s != "queued/0 started/1 output/1 redelivered/2 started/2 output/2 finished/2" {
		t.Errorf("events %s", s)
	}
	if !strings.HasPrefix(want.String(), out[1]) || strings.Count(out[1], "\n") < 3 {
		t.Errorf("attempt 1 streamed %q, want the first lines", out[1])
	}
	if out[2] != want.String() {
		t.Errorf("attempt 2 streamed %q, want all 15 lines from the first", out[2])
	}
	res := got[len(got)-1].Result
	if res == nil || res.Status != jobs.StatusSucceeded || res.Attempt != 2 || res.Stdout != want.String() {
		t.Errorf("result %+v", res)
	}
	stopDockerWorker(t, w, id)
}

// stopDockerWorker drains the worker and waits for its sandboxes, its warm
// pool's included, to be gone.
func stopDockerWorker(t *testing.T, w *proc, id string) {
	t.Helper()
	w.signal(t, syscall.SIGTERM)
	if code := w.exited(t, 30*time.Second); code != 0 {
		t.Errorf("worker exited %d", code)
	}
	testutil.Eventually(t, 90*time.Second, "no containers of "+id, func() bool { return len(containers(t, executor.LabelWorker+"="+id)) == 0 })
}

// 1 GB to stdout on real Docker: still output_limit, with the output cap
// (1 MiB) kept; the stream holds the cap and a little more; the worker's
// peak memory stays small.
func TestBinaryFloodEventsDocker(t *testing.T) {
	t.Parallel()
	workertest.Sandbox(t, executor.Config{WorkerID: "probe"}) // Docker and the image answer, or skip
	url, client, js := natsServer(t)
	id := uniqueID("flood-events")
	w := dockerWorker(t, url, id, "--pool", "0")
	testutil.Eventually(t, 60*time.Second, "worker up", func() bool { return strings.Contains(w.logs.String(), `"msg":"worker started"`) })
	idle, err := procfs.Status(w.cmd.Process.Pid, "VmRSS")
	if err != nil {
		t.Fatal(err)
	}

	const code = "import sys\nb = b'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.buffer.write(b)\n"
	if _, err := client.Submit(t.Context(), &jobs.Job{ID: "gigabyte", Image: "python", Code: code}); err != nil {
		t.Fatal(err)
	}
	evs, errc := collect(t, client, "gigabyte")
	var got []*jobs.Event
	streamed := 0
	for ev := range evs {
		got = append(got, ev)
		if ev.Type == jobs.EventOutput && ev.Stream == jobs.Stdout {
			streamed += len(ev.DataBytes())
		}
	}
	select {
	case err := <-errc:
		t.Fatalf("follow: %v", err)
	default:
	}
	hwm, err := procfs.Status(w.cmd.Process.Pid, "VmHWM")
	if err != nil {
		t.Fatal(err)
	}
	events, err := js.Stream(t.Context(), fleet.EventsStreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := events.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	res := got[len(got)-1].Result
	t.Logf("result %s, stdout %d bytes; %d events, %d bytes of stdout streamed; stream EVENTS holds %d bytes in %d messages; worker RSS %d KiB idle, peak %d KiB",
		res.Status, len(res.Stdout), len(got), streamed, info.State.Bytes, info.State.Msgs, idle, hwm)
	if res.Status != jobs.StatusOutputLimit || len(res.Stdout) != 1<<20 || !res.StdoutTruncated {
		t.Errorf("result %s, stdout %d bytes, want output_limit with 1 MiB", res.Status, len(res.Stdout))
	}
	if streamed != 1<<20 || !strings.Contains(describe(got), "output_truncated/1:stdout") {
		t.Errorf("streamed %d bytes of stdout (%s), want the cap, 1 MiB, then output_truncated", streamed, describe(got))
	}
	if info.State.Bytes > 1<<20+64<<10 {
		t.Errorf("stream EVENTS holds %d bytes, over the cap plus 64 KiB", info.State.Bytes)
	}
	if hwm > 128<<10 {
		t.Errorf("worker peak RSS %d KiB, over 128 MiB", hwm)
	}
	stopDockerWorker(t, w, id)
}
