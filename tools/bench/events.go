package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// (f) ------------------------------------------------------------------------

// streaming is what publishing each job's events (issue 13) costs a warm
// job that writes nothing: the same job through two workers, one with
// --events=false, in turns, so that the machine's load weighs on both
// alike.
type streaming struct {
	n       int
	on, off []time.Duration
	// CPU of each worker process per job (its embedded NATS server
	// included), which the machine's load hardly moves.
	cpuOn, cpuOff time.Duration
}

// streamingCost runs phase (f): o.eventsN jobs per worker, each worker
// with --slots 1 --pool 2, in pairs, a pause after each job for the pool
// to refill (a warm job is what is measured).
func streamingCost(ctx context.Context, o options) (*streaming, error) {
	on, err := startWorker(ctx, o, "events-on", "--slots", "1", "--pool", "2")
	if err != nil {
		return nil, err
	}
	defer on.stop()
	off, err := startWorker(ctx, o, "events-off", "--slots", "1", "--pool", "2", "--events=false")
	if err != nil {
		return nil, err
	}
	defer off.stop()
	one := func(w *workerProc) (time.Duration, error) {
		jctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		t := time.Now()
		res, err := w.cli.SubmitAndWait(jctx, &jobs.Job{Image: "python", Code: o.quietCode})
		d := time.Since(t)
		if err != nil {
			return 0, w.fail(err)
		}
		if res.Status != jobs.StatusSucceeded {
			return 0, w.fail(fmt.Errorf("job %s: %s %s %s", res.ID, res.Status, res.Error, res.Stderr))
		}
		return d, nil
	}
	// Warm-up of both, then time for the pools to fill.
	for _, w := range []*workerProc{on, off} {
		if _, err := one(w); err != nil {
			return nil, err
		}
	}
	time.Sleep(3 * time.Second)
	s := &streaming{n: o.eventsN}
	on0, off0 := procCPU(on.cmd.Process.Pid), procCPU(off.cmd.Process.Pid)
	// In pairs, the order turned every other pair (on off, off on, ...),
	// so that what follows a pause, or the other worker, weighs on both.
	for i := range 2 * o.eventsN {
		w, into := on, &s.on
		if i%4 == 1 || i%4 == 2 {
			w, into = off, &s.off
		}
		d, err := one(w)
		if err != nil {
			return nil, err
		}
		*into = append(*into, d)
		time.Sleep(300 * time.Millisecond) // the pool refills
	}
	s.cpuOn = (procCPU(on.cmd.Process.Pid) - on0) / time.Duration(o.eventsN)
	s.cpuOff = (procCPU(off.cmd.Process.Pid) - off0) / time.Duration(o.eventsN)
	return s, nil
}

// procCPU is the user and system CPU time of process pid, all its threads,
// from /proc/<pid>/stat (in clock ticks of 10 ms).
func procCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command, which is in parentheses: state is
	// field 3, utime 14, stime 15.
	_, rest, _ := strings.Cut(string(data), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

func (s *streaming) print(w io.Writer, quietCode string) {
	if s == nil {
		return
	}
	on, off := pct(s.on, .5), pct(s.off, .5)
	ratio := float64(on) / float64(off)
	fmt.Fprintf(w, "\n(f)  streaming on vs off: warm python %q (no output), %d jobs each in pairs, --slots 1 --pool 2\n", quietCode, s.n)
	fmt.Fprintf(w, "%-44s %12s %12s\n", "", "p50", "p95")
	fmt.Fprintf(w, "%-44s %12s %12s\n", "     events on (default)", ms(on), ms(pct(s.on, .95)))
	fmt.Fprintf(w, "%-44s %12s %12s\n", "     --events=false", ms(off), ms(pct(s.off, .95)))
	// Each job with events beside the job without it of the same pair: the
	// median of their differences, which the load's drift weighs on less
	// than on either p50.
	var diffs []time.Duration
	for i := range min(len(s.on), len(s.off)) {
		diffs = append(diffs, s.on[i]-s.off[i])
	}
	fmt.Fprintf(w, "     paired: median of (on − off) over %d pairs: %+.1f ms\n", len(diffs), float64(pct(diffs, .5))/float64(time.Millisecond))
	fmt.Fprintf(w, "     worker process CPU per job (its NATS server included): %.1f ms on, %.1f ms off\n",
		float64(s.cpuOn)/float64(time.Millisecond), float64(s.cpuOff)/float64(time.Millisecond))
	v := "MISSED"
	if ratio <= 1.05 {
		v = "met"
	}
	fmt.Fprintf(w, "%-40s %-22s %-22s %s\n", "(f) p50, events on / off", fmt.Sprintf("%.3f×", ratio), "≤ 1.05×", v)
}
