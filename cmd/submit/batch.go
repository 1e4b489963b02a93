package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandfleet/sandfleet/internal/natsurl"
	"github.com/sandfleet/sandfleet/pkg/batch"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// Exit codes of submit batch (with exitUsage 2, exitUnavailable 125 and
// exitInterrupted 130 of cli.go).
const exitSomeFailed = 1 // a job did not succeed, or is pending

// batchCommand is "submit batch": a file of jobs, resumable.
type batchCommand struct {
	m   *Main
	out output

	outPath, name, queue string
	retry                string
	window               int
	strict               bool
	interval             time.Duration
}

func (c *batchCommand) synopsis() string {
	return "batch FILE.jsonl [-o OUT.jsonl] [--json] [--name NAME] [--window N] [--strict] [--queue Q] [--retry errors]"
}

func (c *batchCommand) about() string {
	return `Runs every line of FILE.jsonl (one job per line) and writes the results,
one per line as they arrive, to OUT (default stdout, or nowhere with --json
and no -o). Lines without an "id" get one derived from the batch name (default
FILE's base name without extension) and the line's content, so running the
same command again resumes: stored results are reused, queued and running
jobs are waited for, the rest is published. Each result written gets the
label batch_line, its line in FILE. With -o OUT, the run's manifest (presets
and the image IDs their results ran in, the live workers and their versions,
the jobs' limits, the counts) goes next to it, to OUT's name with
.manifest.json for .jsonl. --retry errors runs again, as <id>-retry<n>, each
job whose stored result is an infrastructure error; the new result names
the old ID in retry_of. The summary counts passes and pass@1 per label value.

Exit codes: 0 every job succeeded; 1 a job did not succeed (or is pending);
2 bad input (bad lines are reported and skipped; with --strict nothing runs);
125 NATS unreachable or OUT unwritable; 130 interrupted (the command to resume is printed).
`
}

func (c *batchCommand) define(fs *pflag.FlagSet) {
	fs.StringVarP(&c.outPath, "out", "o", "", "write the results to `OUT.jsonl` (- is stdout)")
	fs.StringVar(&c.name, "name", "", "batch `NAME` in derived job IDs (default FILE's base name)")
	fs.IntVar(&c.window, "window", 0, "most jobs in flight `N` (default max(64, 2 x the slots of the live workers))")
	fs.BoolVar(&c.strict, "strict", false, "publish nothing if any line is bad (exit 2)")
	fs.StringVar(&c.retry, "retry", "", "`errors`: run again the jobs whose stored result is an infrastructure error, under new IDs")
	fs.StringVar(&c.queue, "queue", jobs.DefaultQueue, "queue `Q` of the lines that name none")
	fs.DurationVar(&c.interval, "progress-interval", 0, "progress line interval (default 200ms on a terminal, 5s otherwise)")
	fs.MarkHidden("progress-interval") // a test knob
	c.out = output{m: c.m}
	c.out.define(fs, "print the summary as one JSON object on stdout", false)
}

func (c *batchCommand) run(ctx context.Context, fs *pflag.FlagSet) error {
	m := c.m
	usage := func(format string, args ...any) error { return usageError("batch", format, args...) }
	if fs.NArg() != 1 {
		return usage("batch takes one FILE.jsonl, got %q", fs.Args())
	}
	path := fs.Arg(0)
	// Non-blocking: opening a FIFO for reading would wait for a writer,
	// before the check below could refuse it. A regular file's reads
	// ignore the flag.
	in, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fail(exitUsage, "%w", err)
	}
	defer in.Close()
	st, err := in.Stat()
	if err == nil && !st.Mode().IsRegular() {
		return fail(exitUsage, "%s: not a regular file (batch reads its input twice)", path)
	}
	name, out, err := c.check(path, st)
	if err != nil {
		return err
	}
	window := c.window

	client, closeConn, err := m.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	if window == 0 {
		window = autoWindow(ctx, client)
	}

	// Results on a terminal are JSON shown safe, as --json's are.
	sink := &resultSink{path: out, stdout: m.Stdout, visible: m.IsTerminal(m.Stdout)}
	defer sink.close(false)
	var badMu sync.Mutex // the terminal's stderr: progress, bad lines
	if sink.visible && m.IsTerminal(m.Stderr) {
		// Results and the live progress line share the terminal: each
		// result first clears the line, which the next tick draws again.
		sink.progress, sink.mu = m.Stderr, &badMu
	}
	runner, err := batch.New(client, batch.Config{
		Name:   name,
		Queue:  c.queue,
		Window: window,
		Strict: c.strict,
		OnStart: func(int) error {
			return sink.open()
		},
		OnBadLine: func(b batch.BadLine) {
			badMu.Lock()
			defer badMu.Unlock()
			m.warnf("%s:%d: %v", path, b.Line, b.Err)
		},
		OnResult:    sink.write,
		RetryErrors: c.retry == "errors",
	})
	if err != nil {
		return fail(exitUsage, "%w", err)
	}

	tty := m.IsTerminal(m.Stderr)
	stopProgress := c.progress(runner, tty, c.progressEvery(tty), &badMu)
	sum, err := runner.Run(ctx, in)
	stopProgress()
	kept, cerr := sink.close(err == nil && !sum.Interrupted)
	if cerr != nil && err == nil {
		return fail(exitUnavailable, "write %s: %w", out, cerr)
	}
	c.printSummary(sum, out)
	if kept {
		m.warnf("%s left as it was: it holds more results than this run wrote (%d); the next run writes them all", out, sink.lines)
	}
	if sink.opened && !kept {
		c.manifest(ctx, client, runner.Manifest(sum), out)
	}
	return c.exit(ctx, sum, err)
}

// progressEvery is how often the progress line is drawn: --progress-interval,
// or 200ms on a terminal and 5s otherwise.
func (c *batchCommand) progressEvery(tty bool) time.Duration {
	switch {
	case c.interval > 0:
		return c.interval
	case tty:
		return 200 * time.Millisecond
	}
	return 5 * time.Second
}

// manifest writes the batch's manifest beside its results at out, and
// says where; a failure is a warning, the results being written.
func (c *batchCommand) manifest(ctx context.Context, client *jobs.Client, man *batch.Manifest, out string) {
	mpath := manifestPath(out)
	if err := writeManifest(ctx, client, man, mpath); err != nil {
		c.m.warnf("manifest: %v", err)
		return
	}
	fmt.Fprintf(c.m.Stderr, "  manifest:   %s\n", mpath)
}

// check checks the flags against the input at path (st: nil when it
// could not be read) and returns the batch's name and the results' path.
func (c *batchCommand) check(path string, st os.FileInfo) (name, out string, err error) {
	usage := func(format string, args ...any) error { return usageError("batch", format, args...) }
	name, out = c.name, c.outPath
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	if batch.CleanName(name) == "" {
		return "", "", usage("--name: empty batch name")
	}
	if !jobs.ValidQueue(c.queue) {
		return "", "", usage("--queue %q must match [A-Za-z0-9_-]{1,64}", c.queue)
	}
	if c.window < 0 {
		return "", "", usage("--window %d is negative", c.window)
	}
	if out == "" && !c.out.json {
		out = "-"
	}
	if ost, err := os.Stat(out); err == nil && st != nil && os.SameFile(st, ost) {
		return "", "", usage("-o %s is FILE itself: its results would replace the jobs", out)
	}
	if c.retry != "" && c.retry != "errors" {
		return "", "", usage("--retry takes errors, not %q", c.retry)
	}
	return name, out, nil
}

// exit is the command's outcome once the run ended with sum and err.
func (c *batchCommand) exit(ctx context.Context, sum *batch.Summary, err error) error {
	m := c.m
	interrupted := ctx.Err() != nil && sum.Interrupted
	switch {
	case errors.Is(err, batch.ErrBadInput):
		return fail(exitUsage, "%w (--strict)", err)
	case interrupted:
		m.warnf("interrupted: %d of %d done; %d published jobs go on in the fleet, %d not published yet",
			sum.Done, sum.Total, sum.InFlight, sum.Pending-sum.InFlight)
		wd, _ := os.Getwd()
		return fail(exitInterrupted, "resume with (in %s): %s", wd, resumeCommand(m.args))
	case err != nil: // batch.ErrUnavailable, errSink
		return fail(exitUnavailable, "%w", err)
	case sum.Bad > 0:
		return exitWith(exitUsage)
	case !sum.AllSucceeded():
		return exitWith(exitSomeFailed)
	}
	return nil
}

// autoWindow sizes the window to keep every live worker's slots fed twice
// over, and at least 64.
func autoWindow(ctx context.Context, client *jobs.Client) int {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := client.Status(ctx)
	if err != nil {
		return 64
	}
	slots := 0
	for _, w := range st.Workers {
		slots += w.Slots
	}
	return max(64, 2*slots)
}

var errSink = errors.New("write results")

// progress prints the batch's progress on stderr until the returned func
// is called: redrawn in place on a terminal, a plain line otherwise.
func (c *batchCommand) progress(r *batch.Runner, tty bool, every time.Duration, mu *sync.Mutex) func() {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				if tty {
					mu.Lock()
					fmt.Fprint(c.m.Stderr, "\r\033[K")
					mu.Unlock()
				}
				return
			case <-t.C:
			}
			p := r.Progress()
			if p.Total == 0 && p.Done == 0 {
				continue // still validating
			}
			line := progressLine(p)
			mu.Lock()
			if tty {
				fmt.Fprintf(c.m.Stderr, "\r\033[K%s", line)
			} else {
				fmt.Fprintf(c.m.Stderr, "progress: %s\n", line)
			}
			mu.Unlock()
		}
	})
	return func() { close(stop); wg.Wait() }
}

func progressLine(p batch.Progress) string {
	pct := 100.0
	if p.Total > 0 {
		pct = float64(p.Done) * 100 / float64(p.Total)
	}
	eta := "?"
	if p.ETA >= 0 {
		eta = p.ETA.Round(time.Second).String()
	}
	return fmt.Sprintf("%d/%d done (%.0f%%), %d in flight, %.1f/s, ETA %s | %s",
		p.Done, p.Total, pct, p.InFlight, p.Rate, eta, batch.FormatStatuses(p.Statuses))
}

func (c *batchCommand) printSummary(s *batch.Summary, out string) {
	if c.out.json {
		c.out.printJSON(s)
	}
	ms := func(v *int64) string {
		if v == nil {
			return "-"
		}
		return (time.Duration(*v) * time.Millisecond).String()
	}
	w := c.m.Stderr
	fmt.Fprintf(w, "batch %s: %d of %d done (%d reused from an earlier run), %d pending, %d bad lines\n",
		s.Name, s.Done, s.Total, s.Reused, s.Pending, s.Bad)
	fmt.Fprintf(w, "  status:     %s\n", batch.FormatStatuses(s.Statuses))
	fmt.Fprintf(w, "  duration:   p50 %s, p95 %s, max %s\n", ms(s.Duration.P50), ms(s.Duration.P95), ms(s.Duration.Max))
	fmt.Fprintf(w, "  wall:       %s, %.2f jobs/s\n", (time.Duration(s.WallMS) * time.Millisecond).String(), s.Throughput)
	fmt.Fprintf(w, "  passed:     %d of %d\n", s.Passed, s.Total)
	if s.Retried > 0 {
		fmt.Fprintf(w, "  retried:    %d errors run again\n", s.Retried)
	}
	for _, g := range s.Groups {
		fmt.Fprintf(w, "  group:      %s\n", batch.FormatGroup(g))
	}
	if out != "" && out != "-" {
		fmt.Fprintf(w, "  results:    %s\n", out)
	}
}

// manifestPath is where a batch's manifest goes: beside its results.
func manifestPath(out string) string {
	return strings.TrimSuffix(out, ".jsonl") + ".manifest.json"
}

// writeManifest completes the manifest with the live workers (when this
// client may read them) and writes it.
func writeManifest(ctx context.Context, client *jobs.Client, mf *batch.Manifest, path string) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if st, err := client.Status(sctx); err == nil {
		for _, w := range st.Workers {
			mf.Workers = append(mf.Workers, batch.ManifestWorker{ID: w.ID, Version: w.Version})
		}
	}
	b, err := json.MarshalIndent(mf, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// resumeCommand is the command line that resumes this batch: submit's
// arguments as given, which name the batch command.
func resumeCommand(args []string) string {
	prog := "submit"
	if filepath.Base(os.Args[0]) == "submit" {
		prog = os.Args[0]
	}
	parts := []string{shellQuote(prog)}
	// A password in --nats is masked: the command is printed, maybe logged.
	natsValue := false
	for _, a := range args {
		switch name, value, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "="); {
		case natsValue:
			a = natsurl.Redact(a)
		case strings.HasPrefix(a, "--") && name == "nats" && hasValue:
			a = a[:len(a)-len(value)] + natsurl.Redact(value)
		}
		natsValue = a == "--nats"
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
