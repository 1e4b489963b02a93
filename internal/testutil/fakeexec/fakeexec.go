// Package fakeexec is an in-memory executor for tests of the worker and the
// CLI: it stands in for internal/executor at the executor boundary only.
//
// A job's code is a tiny script, one command per line:
//
//	print TEXT     append TEXT and a newline to stdout (and tell OnOutput;
//	               OnStart is told before the script runs)
//	eprint TEXT    the same on stderr
//	flood N C      append N copies of the byte C to stdout and to stderr
//	sleep DURATION sleep, or stop early with a canceled result
//	block          wait until the job's context is canceled
//	waitfile PATH  wait until PATH exists (a test releases the job), or
//	               stop early with a canceled result
//	exit N         finish with exit code N (failed when N != 0)
//	timeout        finish as timeout
//	egress H A C O I  account egress to host H: allowed A (true or false),
//	               C connections, O bytes out and I in (a result's egress)
//	egresses N S   account N denied destinations, each a host of S bytes
//	               quoted twice in its reason (a refused flood's egress)
//	png W H        show a W×H PNG (a display output, as a figure)
//	display M TEXT show TEXT as a display output of MIME type M
//	infra          fail as a broken infrastructure would (an error wrapping
//	               ErrInfra), without the fake going down: the worker holds
//	               the job, then hands it back, and its deliveries run out
//	write, append, cat, fill  files of a workspace (see workspace.go)
//
// Images other than "python" and "shell" are rejected as unknown presets,
// and limits are resolved against limits.Default() and Caps, as the real
// executor does.
package fakeexec

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/png"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// ErrDown is returned by Run and Ping while the fake is Down.
var ErrDown = errors.New("fake infrastructure down")

// ErrInfra is returned by Run for a job whose script says infra.
var ErrInfra = errors.New("fake infrastructure failure")

// Executor is the fake. The zero value is ready to use.
type Executor struct {
	Caps *limits.Caps // default limits.DefaultCaps()
	// Pool, if set, is what WarmPool reports: the fake's warm pool, for
	// heartbeats (internal/worker's PoolReporter).
	Pool *jobs.PoolStatus
	// OnRun, if set, is called with the job's ID each time a run starts
	// (what Runs counts), from the goroutine calling Run.
	OnRun func(id string)

	mu      sync.Mutex
	runs    map[string]int
	running int
	max     int
	down    bool
}

// Runs returns how many times the job with this ID was run (Run calls that
// got past validation and infrastructure).
func (e *Executor) Runs(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runs[id]
}

// Total returns the number of runs of all jobs.
func (e *Executor) Total() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, v := range e.runs {
		n += v
	}
	return n
}

// MaxConcurrent returns the most jobs that ran at once.
func (e *Executor) MaxConcurrent() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.max
}

// Running returns how many jobs run now.
func (e *Executor) Running() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.running
}

// SetDown makes Run and Ping fail with ErrDown (true) or work again.
func (e *Executor) SetDown(down bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.down = down
}

// Presets returns the images the fake accepts, as internal/executor's Presets.
func (e *Executor) Presets() []string { return []string{"python", "shell"} }

// WarmPool returns Pool.
func (e *Executor) WarmPool() *jobs.PoolStatus { return e.Pool }

// Ping fails while the fake is down.
func (e *Executor) Ping(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.down {
		return ErrDown
	}
	return nil
}

// Run runs the job's script.
func (e *Executor) Run(ctx context.Context, job *jobs.Job, opts jobrun.Options) (*jobs.Result, error) {
	start := time.Now().UTC()
	res := &jobs.Result{ID: job.ID, StartedAt: &start, Labels: job.Labels, RetryOf: job.RetryOf}
	finish := func(s jobs.Status, code *int) (*jobs.Result, error) {
		end := time.Now().UTC()
		d := end.Sub(start).Milliseconds()
		res.Status, res.Exit, res.FinishedAt, res.DurationMS = s, code, &end, &d
		return res, nil
	}
	lim, why := e.admit(job)
	if why != "" {
		res.StartedAt = nil
		res.Error = why
		return finish(jobs.StatusRejected, nil)
	}

	e.mu.Lock()
	if e.down {
		e.mu.Unlock()
		return nil, ErrDown
	}
	if e.runs == nil {
		e.runs = map[string]int{}
	}
	e.runs[job.ID]++
	e.running++
	e.max = max(e.max, e.running)
	e.mu.Unlock()
	if e.OnRun != nil {
		e.OnRun(job.ID)
	}
	defer func() {
		e.mu.Lock()
		e.running--
		e.mu.Unlock()
	}()

	if opts.OnStart != nil {
		opts.OnStart(jobrun.Start{Container: "fake-" + job.ID, Limits: lim})
	}
	var stdout, stderr strings.Builder
	defer func() { res.Stdout, res.Stderr = stdout.String(), stderr.String() }()
	ws, err := restore(opts, job) // workspace.go
	if err != nil {
		code := 125
		res.Error = "restoring the workspace: " + err.Error()
		return finish(jobs.StatusFailed, &code)
	}
	defer func() { ws.archive(opts, res.Status) }()
	sc := bufio.NewScanner(strings.NewReader(job.Code))
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if ws.command(cmd, arg, &stdout) || output(cmd, arg, res, &stdout, &stderr, opts) {
			continue
		}
		switch cmd {
		case "sleep", "block", "waitfile":
			if !wait(ctx, cmd, arg) {
				return finish(jobs.StatusCanceled, nil)
			}
		case "exit":
			n, _ := strconv.Atoi(arg)
			if n != 0 {
				return finish(jobs.StatusFailed, &n)
			}
			return finish(jobs.StatusSucceeded, &n)
		case "timeout":
			return finish(jobs.StatusTimeout, nil)
		case "infra":
			return nil, ErrInfra
		}
	}
	zero := 0
	return finish(jobs.StatusSucceeded, &zero)
}

// admit is the fake's admission: a preset it has, and limits within its
// caps. why says why a job is rejected.
func (e *Executor) admit(job *jobs.Job) (lim limits.Limits, why string) {
	if job.Image != "python" && job.Image != "shell" {
		return lim, "image: unknown preset " + strconv.Quote(job.Image) + " (this worker has: python, shell)"
	}
	caps := limits.DefaultCaps()
	if e.Caps != nil {
		caps = *e.Caps
	}
	lim, err := limits.Resolve(job.Limits, limits.Default(), caps)
	if err != nil {
		return lim, err.Error()
	}
	return lim, ""
}

// output runs a script's command that writes output or figures into
// res (print, eprint, flood, egress, egresses, png, display); false for
// any other command.
func output(cmd, arg string, res *jobs.Result, stdout, stderr *strings.Builder, opts jobrun.Options) bool {
	switch cmd {
	case "print":
		stdout.WriteString(arg + "\n")
		tell(opts, jobs.Stdout, arg+"\n")
	case "eprint":
		stderr.WriteString(arg + "\n")
		tell(opts, jobs.Stderr, arg+"\n")
	case "flood":
		n, c, _ := strings.Cut(arg, " ")
		count, _ := strconv.Atoi(n)
		stdout.WriteString(strings.Repeat(c, count))
		stderr.WriteString(strings.Repeat(c, count))
		tell(opts, jobs.Stdout, strings.Repeat(c, count))
		tell(opts, jobs.Stderr, strings.Repeat(c, count))
	case "egress":
		f := strings.Fields(arg)
		if len(f) == 5 {
			n := func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }
			res.Egress = append(res.Egress, limits.NetworkUse{Host: f[0], Allowed: f[1] == "true",
				Connections: n(f[2]), BytesOut: n(f[3]), BytesIn: n(f[4])})
		}
	case "egresses":
		var count, size int
		_, _ = fmt.Sscan(arg, &count, &size)
		for i := range count {
			host := fmt.Sprintf("%d.%s.test:443", i, strings.Repeat("h", size))
			res.Egress = append(res.Egress, limits.NetworkUse{Host: host, Rule: "none", Connections: 1,
				Reason: fmt.Sprintf("%q is not %q", host, host)})
		}
	case "png":
		var w, h int
		_, _ = fmt.Sscan(arg, &w, &h)
		res.Display = append(res.Display, pngDisplay(w, h))
	case "display":
		mime, text, _ := strings.Cut(arg, " ")
		res.Display = append(res.Display, jobs.Display{MIME: mime, Data: base64.StdEncoding.EncodeToString([]byte(text))})
	default:
		return false
	}
	return true
}

// wait runs a script's waiting command: sleep D, block (until canceled),
// waitfile PATH (until it exists); false when ctx ended first.
func wait(ctx context.Context, cmd, arg string) bool {
	switch cmd {
	case "sleep", "block":
		var until <-chan time.Time
		if cmd == "sleep" {
			d, _ := time.ParseDuration(arg)
			t := time.NewTimer(d)
			defer t.Stop()
			until = t.C
		}
		select {
		case <-until:
			return true
		case <-ctx.Done():
			return false
		}
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(arg); err == nil {
			return true
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return false
		}
	}
}

// pngDisplay is a w×h PNG, one colour, as a display output.
func pngDisplay(w, h int) jobs.Display {
	img := image.NewGray(image.Rect(0, 0, max(w, 1), max(h, 1)))
	var b bytes.Buffer
	_ = png.Encode(&b, img)
	return jobs.Display{MIME: "image/png", Data: base64.StdEncoding.EncodeToString(b.Bytes()), Width: w, Height: h}
}

// tell passes output to opts.OnOutput as the real executor does, as the
// script writes it.
func tell(opts jobrun.Options, s jobs.Stream, text string) {
	if opts.OnOutput != nil {
		opts.OnOutput(s, []byte(text))
	}
}
