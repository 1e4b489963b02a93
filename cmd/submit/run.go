package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// runCommand is "submit run": one job, its output, its exit code.
type runCommand struct {
	m   *Main
	out output

	code, image, stdinFile, id, queue string
	testsFile                         string
	detach, network, stopOnFailure    bool
	egress                            []string
	waitRoom                          time.Duration
	lim                               limits.Limits
	files, env, labels                kvFlag
	ws                                workspaceFlags // workspace.go
}

func (c *runCommand) synopsis() string { return "run [-c CODE | FILE | -] [flags]" }

func (c *runCommand) about() string {
	return `Runs one job and waits for its result: the code given with -c, read from
FILE, or read from stdin (-). Prints the job's stdout on stdout and its
stderr on stderr as the job writes them; for any status but succeeded and
failed, one more line on stderr says what happened. Ctrl-C stops waiting
(exit 130); the job goes on ("submit logs -f ID" follows it again). Exits as the job: 0 succeeded, its exit code
when it failed, 65 compile_error, 124 timeout, 137 oom, 1 output_limit, 130 canceled,
2 rejected, 125 error. On a terminal the job's control characters are
shown (ESC as ^[) rather than acted on; pipes and files get its bytes.

The same --id runs once: submitting it again returns the stored result.
With --detach, prints the job ID and exits; "submit wait ID" gets the result.
`
}

func (c *runCommand) define(fs *pflag.FlagSet) {
	c.files.what, c.env.what, c.labels.what = "NAME=PATH", "K=V", "K=V"
	fs.StringVarP(&c.code, "code", "c", "", "the job's `CODE` (instead of a FILE or -)")
	fs.StringVar(&c.image, "image", "", "preset `NAME` of the worker (python, shell, node, c, cpp, java, go, rust) or a template's (submit template ls); default shell for a .sh FILE, else python")
	fs.Var(cmdline.Value(&c.lim.Timeout, "duration"), "timeout", "wall-clock limit `D`, e.g. 30s (default the worker's, 30s)")
	fs.Var(cmdline.Value(&c.lim.Memory, "size"), "memory", "memory limit `SIZE`, e.g. 512m (default the worker's, 512m)")
	fs.Float64Var(&c.lim.CPUs, "cpus", 0, "CPU limit `N`, e.g. 1.5 (default the worker's, 1)")
	fs.Int64Var(&c.lim.Pids, "pids", 0, "process limit `N` (default the worker's, 64)")
	fs.Var(cmdline.Value(&c.lim.Output, "size"), "output", "output cap per stream `SIZE` (default the worker's, 1m)")
	fs.BoolVar(&c.network, "network", false, "ask for open egress: the internet, never private addresses (the worker must allow it)")
	fs.StringArrayVar(&c.egress, "egress", nil, "allow egress to `RULE`: a host (*.example.org), an IP or CIDR, with an optional :PORT (repeatable; within the worker's --egress-allow)")
	fs.StringVar(&c.stdinFile, "stdin", "", "`FILE` fed to the job's stdin")
	fs.StringVar(&c.testsFile, "tests", "", "judge the job: `FILE` is a JSON array of test cases ({\"stdin\", \"args\", \"expected_stdout\", \"timeout\", \"compare\", \"tolerance\", \"name\"})")
	fs.BoolVar(&c.stopOnFailure, "stop-on-first-failure", false, "with --tests: skip the cases after the first that fails")
	fs.Var(&c.files, "file", "extra file `NAME=PATH` in the working directory (repeatable)")
	fs.Var(&c.env, "env", "environment variable `K=V` (repeatable)")
	fs.Var(&c.labels, "label", "label `K=V` copied into the result (repeatable)")
	fs.StringVar(&c.id, "id", "", "job `ID` ([A-Za-z0-9_-]{1,128}; default a UUIDv7); the same ID runs once")
	fs.StringVar(&c.queue, "queue", jobs.DefaultQueue, "queue `NAME`")
	fs.BoolVar(&c.detach, "detach", false, "print the job ID and exit without waiting (then: submit wait ID)")
	fs.DurationVar(&c.waitRoom, "wait-room", 0, "when the queue is full, retry with backoff for up to `D` (default 0: fail at once, exit 125)")
	c.ws.define(fs)
	c.out = output{m: c.m}
	c.out.define(fs, "print the Result object as JSON on stdout", true)
}

func (c *runCommand) run(ctx context.Context, fs *pflag.FlagSet) error {
	job, err := c.job(fs)
	if err != nil {
		return err
	}
	client, closeConn, err := c.m.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	if job.ID, err = client.QualifyID(job.ID); err != nil { // a tenant's: <tenant>.<id>
		return usageError("run", "--id: %v", err)
	}
	claim := jobs.ClaimOf(job)
	submit := func() (string, error) {
		if c.waitRoom <= 0 {
			return client.Submit(ctx, job)
		}
		ctx, cancel := context.WithTimeout(ctx, c.waitRoom)
		defer cancel()
		return client.SubmitWhenRoom(ctx, job, 100*time.Millisecond, 5*time.Second)
	}
	if c.detach {
		id, err := submit()
		if err != nil {
			return submitFailed(err)
		}
		fmt.Fprintln(c.m.Stdout, id)
		return nil
	}
	// Live, unless the output is JSON; the artifacts are downloaded once
	// the result is in.
	if !c.out.json {
		// The job's events are kept, so following after the submit
		// misses nothing.
		if _, err := submit(); err != nil {
			return submitFailed(err)
		}
		c.out.then = func(res *jobs.Result) error {
			if err := ownResult(claim, res); err != nil {
				return err
			}
			return c.ws.download(ctx, c.m, client, res)
		}
		return c.out.watch(ctx, client, job.ID, true)
	}
	rw, err := client.Watch(ctx, job.ID)
	if err != nil {
		return fail(exitUnavailable, "%w", err)
	}
	defer rw.Stop()
	if _, err := submit(); err != nil {
		return submitFailed(err)
	}
	res, err := c.out.next(ctx, rw, job.ID)
	if err != nil {
		return err
	}
	if err := ownResult(claim, res); err != nil {
		return err
	}
	if err := c.ws.download(ctx, c.m, client, res); err != nil {
		return err
	}
	return c.out.report(res)
}

// job builds the job of the command line.
func (c *runCommand) job(fs *pflag.FlagSet) (*jobs.Job, error) {
	usage := func(format string, args ...any) error { return usageError("run", format, args...) }
	pos := fs.Args()
	code, image := c.code, c.image
	switch {
	case len(pos) > 1:
		return nil, usage("run takes one FILE (or -), got %q", pos)
	case fs.Changed("code") && len(pos) == 1:
		return nil, usage("give -c CODE or a FILE, not both")
	case !fs.Changed("code") && len(pos) == 0:
		return nil, usage("no code: give -c CODE, a FILE, or - to read it from stdin")
	case len(pos) == 1 && pos[0] == "-":
		data, err := io.ReadAll(c.m.Stdin)
		if err != nil {
			return nil, usage("read code from stdin: %v", err)
		}
		code = string(data)
	case len(pos) == 1:
		data, err := os.ReadFile(pos[0])
		if err != nil {
			return nil, usage("%v", err)
		}
		code = string(data)
		if image == "" && strings.HasSuffix(pos[0], ".sh") {
			image = "shell"
		}
	}
	if image == "" {
		image = "python"
	}
	lim := c.lim
	if c.network || len(c.egress) > 0 {
		lim.Network = &limits.Network{Open: c.network}
		for _, e := range c.egress {
			r, err := limits.ParseRule(e)
			if err != nil {
				return nil, usage("--egress: %v", err)
			}
			lim.Network.Allow = append(lim.Network.Allow, r)
		}
	}
	job := &jobs.Job{ID: c.id, Queue: c.queue, Image: image, Code: code, Env: c.env.m, Labels: c.labels.m, Limits: lim}
	if c.stdinFile != "" {
		data, err := os.ReadFile(c.stdinFile)
		if err != nil {
			return nil, usage("--stdin: %v", err)
		}
		job.Stdin = string(data)
	}
	if c.testsFile != "" {
		data, err := os.ReadFile(c.testsFile)
		if err != nil {
			return nil, usage("--tests: %v", err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&job.Tests); err != nil {
			return nil, usage("--tests %s: want a JSON array of test cases: %v", c.testsFile, err)
		}
	}
	job.StopOnFirstFailure = c.stopOnFailure
	for name, path := range c.files.m {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, usage("--file %s=%s: %v", name, path, err)
		}
		if job.Files == nil {
			job.Files = map[string]string{}
		}
		job.Files[name] = string(data)
	}
	if err := c.ws.apply(job); err != nil {
		return nil, usage("%v", err)
	}
	job.Normalize()
	if err := job.Validate(); err != nil {
		return nil, usage("%v", err)
	}
	return job, nil
}

// ownResult refuses a result stored at the job's ID that is another
// job's (an --id someone else used): its verdict is not this job's.
func ownResult(claim jobs.Claim, res *jobs.Result) error {
	if err := claim.Check(res); err != nil {
		return fail(exitUsage, "--id: %w", err)
	}
	return nil
}

func submitFailed(err error) error {
	switch {
	case errors.Is(err, jobs.ErrInvalidJob):
		return fail(exitUsage, "%w", err)
	case errors.Is(err, jobs.ErrQueueFull):
		return fail(exitUnavailable, "the queue is full; nothing was queued: try again later, or wait for room with --wait-room D (%w)", err)
	}
	return fail(exitUnavailable, "%w", err)
}

// await waits on an open watch and reports the result.
func (o *output) await(ctx context.Context, rw *jobs.ResultWatch, id string) error {
	res, err := o.next(ctx, rw, id)
	if err != nil {
		return err
	}
	return o.report(res)
}

// next waits on an open watch for the result.
func (o *output) next(ctx context.Context, rw *jobs.ResultWatch, id string) (*jobs.Result, error) {
	res, err := rw.Next(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fail(exitInterrupted, "interrupted; job %s goes on: submit wait %s", id, id)
		}
		return nil, fail(exitUnavailable, "wait for %s: %w", id, err)
	}
	return res, nil
}

// report prints a result (the job's output, or the Result as JSON) and
// ends with the exit code of its status.
func (o *output) report(res *jobs.Result) error {
	if o.json {
		o.printJSON(res)
		return exitWith(res.ExitCode())
	}
	// The bytes as the job wrote them (a stream that was not UTF-8 travels
	// as base64), made visible on a terminal.
	o.text(o.m.Stdout, string(res.StdoutBytes()))
	o.text(o.m.Stderr, string(res.StderrBytes()))
	return o.ended(res)
}

// ended says on stderr what happened to a job that did not end on its own
// or was not run, and ends with the exit code of its status.
func (o *output) ended(res *jobs.Result) error {
	if res.Status == jobs.StatusCompileErr && res.Compile != nil {
		o.text(o.m.Stderr, res.Compile.Output)
	}
	if tr := res.Tests; tr != nil {
		for _, c := range tr.Cases {
			if c.Verdict == jobs.CasePassed || c.Verdict == jobs.CaseNotRun {
				continue
			}
			line := fmt.Sprintf("submit: case %d", c.Index)
			if c.Name != "" {
				line += " " + strconv.Quote(c.Name)
			}
			line += ": " + c.Verdict
			if c.Diff != nil {
				line += fmt.Sprintf(" at line %d: expected %q, got %q", c.Diff.Line, c.Diff.Expected, c.Diff.Actual)
			} else if c.Error != "" {
				line += ": " + c.Error
			}
			o.text(o.m.Stderr, line+"\n")
		}
		o.text(o.m.Stderr, fmt.Sprintf("submit: tests: %d of %d passed (%d failed, %d not run)\n", tr.Passed, tr.Total, tr.Failed, tr.NotRun))
	}
	switch res.Status {
	case jobs.StatusSucceeded, jobs.StatusFailed:
	default:
		msg := fmt.Sprintf("submit: job %s: %s", res.ID, res.Status)
		if res.Error != "" {
			msg += ": " + res.Error
		}
		o.text(o.m.Stderr, msg+"\n")
	}
	return exitWith(res.ExitCode())
}

// idCommand is "submit get", "wait" and "cancel": one job ID each.
type idCommand struct {
	m    *Main
	name string
	out  output
}

func (c *idCommand) synopsis() string { return c.name + " ID [--json]" }

func (c *idCommand) about() string {
	switch c.name {
	case "get":
		return `Prints the stored result of job ID as "submit run" does, and exits as the
job. Exits 75 while the job is queued or running, 1 for an unknown ID
(results are kept 24h); as a tenant, which cannot read the queue, 75 for
both.
`
	case "wait":
		return `Waits for the result of job ID (a job submitted with "submit run --detach"),
prints it as "submit run" does, and exits as the job. Exits 1 for an
unknown ID; interrupted, 130 (the job goes on).
`
	}
	return `Cancels job ID. A queued job finishes as canceled without running; a
running one's sandbox is killed. Prints "canceled ID" and exits 0; when no
worker is up and this client may not write results, prints that the
request is recorded (the job finishes as canceled when a worker takes it)
and exits 0. Exits 1 for an unknown or already finished job.
`
}

func (c *idCommand) define(fs *pflag.FlagSet) {
	c.out = output{m: c.m}
	if c.name == "cancel" {
		c.out.define(fs, "print the canceled Result object as JSON on stdout", false)
		return
	}
	c.out.define(fs, "print the Result object as JSON on stdout", true)
}

func (c *idCommand) run(ctx context.Context, fs *pflag.FlagSet) error {
	if fs.NArg() != 1 {
		return usageError(c.name, "%s takes one job ID, got %q", c.name, fs.Args())
	}
	id := fs.Arg(0)
	client, closeConn, err := c.m.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	switch c.name {
	case "get":
		return c.get(ctx, client, id)
	case "wait":
		return c.wait(ctx, client, id)
	}
	return c.cancel(ctx, client, id)
}

func (c *idCommand) get(ctx context.Context, client *jobs.Client, id string) error {
	res, err := client.Get(ctx, id)
	if err == nil {
		return c.out.report(res)
	}
	if !errors.Is(err, jobs.ErrNotFound) {
		return fail(exitUnavailable, "%w", err)
	}
	queued, err := client.Pending(ctx, id)
	switch {
	case errors.Is(err, jobs.ErrNotTenants):
		return fail(exitPending, "job %s has no result yet: queued or running, or no such job (a tenant cannot read the queue; results are kept 24h)", id)
	case err != nil:
		return fail(exitUnavailable, "%w", err)
	case queued:
		return fail(exitPending, "job %s is queued or running; no result yet (submit wait %s)", id, id)
	}
	return fail(exitNotFound, "no job %s: no result and nothing queued (results are kept 24h)", id)
}

func (c *idCommand) wait(ctx context.Context, client *jobs.Client, id string) error {
	if !jobs.ValidID(id) {
		return fail(exitNotFound, "no job %q: IDs match [A-Za-z0-9_-]{1,128}", id)
	}
	rw, err := client.Watch(ctx, id)
	if err != nil {
		return fail(exitUnavailable, "%w", err)
	}
	defer rw.Stop()
	// Opened the watch first: a job finishing now is not missed, and one
	// that is neither stored nor queued is unknown.
	if _, err := client.Get(ctx, id); errors.Is(err, jobs.ErrNotFound) {
		queued, err := client.Pending(ctx, id)
		if errors.Is(err, jobs.ErrNotTenants) {
			queued, err = true, nil // a tenant cannot look at the queue: wait for the result
		}
		if err != nil {
			return fail(exitUnavailable, "%w", err)
		}
		if !queued {
			if _, err := client.Get(ctx, id); errors.Is(err, jobs.ErrNotFound) {
				return fail(exitNotFound, "no job %s: no result and nothing queued", id)
			}
		}
	}
	return c.out.await(ctx, rw, id)
}

func (c *idCommand) cancel(ctx context.Context, client *jobs.Client, id string) error {
	res, err := client.Cancel(ctx, id)
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return fail(exitNotFound, "no job %s to cancel", id)
	case errors.Is(err, jobs.ErrCancelPending):
		// Recorded, not yet final: a fleet's submitter may not store the
		// result itself, and no worker took the job within CancelWait.
		msg := fmt.Sprintf("cancel of %s requested; it will finish as canceled when a worker takes it (submit wait %s)", id, id)
		if c.out.json {
			c.m.warnf("%s", msg) // stdout carries Result objects only
		} else {
			fmt.Fprintln(c.m.Stdout, msg)
		}
		return nil
	case errors.Is(err, jobs.ErrFinished):
		if c.out.json {
			c.out.printJSON(res)
		}
		return fail(exitNotFound, "job %s already finished: %s", id, res.Status)
	case err != nil:
		return fail(exitUnavailable, "%w", err)
	}
	if c.out.json {
		c.out.printJSON(res)
	} else {
		fmt.Fprintf(c.m.Stdout, "canceled %s\n", id)
	}
	return nil
}
