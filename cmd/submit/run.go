package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/natsurl"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// Exit codes of submit besides the status table of docs/design.md (which run,
// get and wait exit with once they have a result).
const (
	exitOK          = 0
	exitNotFound    = 1   // get, wait, cancel: no job with this ID; cancel: already finished
	exitUsage       = 2   // bad command line or invalid job (as the rejected status)
	exitPending     = 75  // get: the job is queued or running, no result yet (EX_TEMPFAIL)
	exitUnavailable = 125 // NATS unreachable, queue full (as the error status)
	exitInterrupted = 130 // interrupted while waiting; the job goes on
)

const usageText = `usage: submit <command> [flags] [args]

Commands:
  run [-c CODE | FILE | -] [flags]   run a job and print its output (exits as the job)
  get ID [--json]                    print a stored result
  wait ID [--json]                   wait for a job's result
  cancel ID [--json]                 cancel a queued or running job (exits 0
                                     once canceled, or once the request is
                                     recorded and the job will finish as
                                     canceled when a worker takes it)
  batch FILE.jsonl [-o OUT] [flags]  run a file of jobs, resumable (exits 0 all
                                     succeeded, 1 some did not, 2 bad input)
  status [--json]                    show the workers and each queue's backlog

Every command takes --nats URL (env NATS_URL, default nats://127.0.0.1:4222).
Flags may come before or after arguments. "submit <command> --help" lists
a command's flags.

Exit codes of run, get and wait, from the job's status:
  succeeded 0, failed the job's exit code, timeout 124, oom 137,
  output_limit 1, canceled 130, rejected 2, error 125.
Other exit codes:
  1   get/wait/cancel: no job with this ID; cancel: the job already finished
  2   usage error, or a job submit refuses as invalid
  75  get: the job is queued or running, no result yet
  125 NATS unreachable, or the queue is full
  130 interrupted while waiting (the job goes on: submit wait ID); batch:
      interrupted, the command to resume is printed
`

// Run runs the submit command line and returns its exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cli{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return c.run(args[1:])
	case "get":
		return c.idCommand("get", args[1:], c.get)
	case "wait":
		return c.idCommand("wait", args[1:], c.wait)
	case "cancel":
		return c.idCommand("cancel", args[1:], c.cancel)
	case "batch":
		return c.batch(args[1:])
	case "status":
		return c.status(args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usageText)
		return exitOK
	}
	fmt.Fprintf(stderr, "submit: unknown command %q\n\n%s", args[0], usageText)
	return exitUsage
}

type cli struct {
	ctx            context.Context
	stdin          io.Reader
	stdout, stderr io.Writer
	natsURL        string
	json           bool
}

func (c *cli) errorf(format string, args ...any) {
	fmt.Fprintf(c.stderr, "submit: "+format+"\n", args...)
}

func (c *cli) commonFlags(fs *flag.FlagSet) {
	def := os.Getenv("NATS_URL")
	if def == "" {
		def = nats.DefaultURL
	}
	fs.StringVar(&c.natsURL, "nats", def, "NATS server `URL` (env NATS_URL)")
	fs.BoolVar(&c.json, "json", false, "print the Result object as JSON on stdout")
}

// parse parses interspersed flags and arguments: Go's flag package stops
// at the first argument, so flags are moved before the arguments first.
// "--" ends the flags; "-" is an argument (stdin).
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue // fs.Parse reports it
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	if err := fs.Parse(flags); err != nil {
		return nil, err
	}
	return pos, nil
}

func (c *cli) newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("submit "+name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: submit %s\n\nFlags:\n%s", synopsis, flagDefaults(fs))
	}
	return fs
}

var longFlag = regexp.MustCompile(`(?m)^(  )-(\w\w)`)

// flagDefaults is fs.PrintDefaults with the GNU-style "--" the docs use
// (the flag package accepts both).
func flagDefaults(fs *flag.FlagSet) string {
	var b strings.Builder
	out := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	return longFlag.ReplaceAllString(b.String(), "$1--$2")
}

// parseOrExit parses args and returns the exit code to return now, if any.
func (c *cli) parseOrExit(fs *flag.FlagSet, args []string) ([]string, int, bool) {
	if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "-help" || a == "--help" }) {
		fs.SetOutput(c.stdout) // help asked for is output, not an error
	}
	pos, err := parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, exitOK, true
	}
	if err != nil {
		return nil, exitUsage, true // the flag package printed the error and usage
	}
	return pos, 0, false
}

func (c *cli) connect() (*jobs.Client, func(), int) {
	nc, err := nats.Connect(c.natsURL, nats.Name("sandfleet-submit"), nats.Timeout(5*time.Second))
	if err != nil {
		c.errorf("cannot reach NATS at %s: %v (start a worker with --embedded, or set --nats / NATS_URL)",
			natsurl.Redact(c.natsURL), natsurl.Error(err, c.natsURL))
		return nil, nil, exitUnavailable
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		c.errorf("%v", err)
		return nil, nil, exitUnavailable
	}
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	client, err := jobs.NewClient(ctx, js, jobs.Topology{})
	if err != nil {
		nc.Close()
		c.errorf("open the job stream at %s: %v", natsurl.Redact(c.natsURL), natsurl.Error(err, c.natsURL))
		return nil, nil, exitUnavailable
	}
	return client, nc.Close, 0
}

// kvFlag collects repeated NAME=VALUE flags.
type kvFlag struct {
	m    map[string]string
	what string
}

func (f *kvFlag) String() string { return "" }
func (f *kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want %s, got %q", f.what, s)
	}
	if f.m == nil {
		f.m = map[string]string{}
	}
	f.m[k] = v
	return nil
}

func (c *cli) run(args []string) int {
	fs := c.newFlagSet("run", "run [-c CODE | FILE | -] [flags]")
	c.commonFlags(fs)
	var (
		code, image, stdinFile, id, queue string
		detach, network                   bool
		waitRoom                          time.Duration
		lim                               limits.Limits
		files                             = kvFlag{what: "NAME=PATH"}
		env                               = kvFlag{what: "K=V"}
		labels                            = kvFlag{what: "K=V"}
	)
	fs.StringVar(&code, "c", "", "the job's `CODE` (instead of a FILE or -)")
	fs.StringVar(&image, "image", "", "preset `NAME` of the worker (python, shell; default from the FILE's extension, else python)")
	fs.Var(&lim.Timeout, "timeout", "wall-clock limit `D`, e.g. 30s (default the worker's, 30s)")
	fs.Var(&lim.Memory, "memory", "memory limit `SIZE`, e.g. 512m (default the worker's, 512m)")
	fs.Float64Var(&lim.CPUs, "cpus", 0, "CPU limit `N`, e.g. 1.5 (default the worker's, 1)")
	fs.Int64Var(&lim.Pids, "pids", 0, "process limit `N` (default the worker's, 64)")
	fs.Var(&lim.Output, "output", "output cap per stream `SIZE` (default the worker's, 1m)")
	fs.BoolVar(&network, "network", false, "ask for a network (the worker must allow it)")
	fs.StringVar(&stdinFile, "stdin", "", "`FILE` fed to the job's stdin")
	fs.Var(&files, "file", "extra file `NAME=PATH` in the working directory (repeatable)")
	fs.Var(&env, "env", "environment variable `K=V` (repeatable)")
	fs.Var(&labels, "label", "label `K=V` copied into the result (repeatable)")
	fs.StringVar(&id, "id", "", "job `ID` ([A-Za-z0-9_-]{1,128}; default a UUIDv7); the same ID runs once")
	fs.StringVar(&queue, "queue", jobs.DefaultQueue, "queue `NAME`")
	fs.BoolVar(&detach, "detach", false, "print the job ID and exit without waiting (then: submit wait ID)")
	fs.DurationVar(&waitRoom, "wait-room", 0, "when the queue is full, retry with backoff for up to `D` (default 0: fail at once, exit 125)")
	pos, exit, done := c.parseOrExit(fs, args)
	if done {
		return exit
	}
	usage := func(format string, args ...any) int {
		c.errorf(format, args...)
		fmt.Fprintln(c.stderr, `run "submit run --help" for the flags`)
		return exitUsage
	}
	codeSet := false
	fs.Visit(func(f *flag.Flag) { codeSet = codeSet || f.Name == "c" })
	switch {
	case len(pos) > 1:
		return usage("run takes one FILE (or -), got %q", pos)
	case codeSet && len(pos) == 1:
		return usage("give -c CODE or a FILE, not both")
	case !codeSet && len(pos) == 0:
		return usage("no code: give -c CODE, a FILE, or - to read it from stdin")
	case len(pos) == 1 && pos[0] == "-":
		data, err := io.ReadAll(c.stdin)
		if err != nil {
			return usage("read code from stdin: %v", err)
		}
		code = string(data)
	case len(pos) == 1:
		data, err := os.ReadFile(pos[0])
		if err != nil {
			return usage("%v", err)
		}
		code = string(data)
		if image == "" && strings.HasSuffix(pos[0], ".sh") {
			image = "shell"
		}
	}
	if image == "" {
		image = "python"
	}
	lim.Network = network
	job := &jobs.Job{ID: id, Queue: queue, Image: image, Code: code, Env: env.m, Labels: labels.m, Limits: lim}
	if stdinFile != "" {
		data, err := os.ReadFile(stdinFile)
		if err != nil {
			return usage("--stdin: %v", err)
		}
		job.Stdin = string(data)
	}
	for name, path := range files.m {
		data, err := os.ReadFile(path)
		if err != nil {
			return usage("--file %s=%s: %v", name, path, err)
		}
		if job.Files == nil {
			job.Files = map[string]string{}
		}
		job.Files[name] = string(data)
	}
	job.Normalize()
	if err := job.Validate(); err != nil {
		return usage("%v", err)
	}

	client, closeConn, exit := c.connect()
	if closeConn == nil {
		return exit
	}
	defer closeConn()
	submit := func() (string, error) {
		if waitRoom <= 0 {
			return client.Submit(c.ctx, job)
		}
		ctx, cancel := context.WithTimeout(c.ctx, waitRoom)
		defer cancel()
		b := backoff.NewExponentialBackOff()
		b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, 0
		return client.SubmitWhenRoom(ctx, job, b)
	}
	if detach {
		id, err := submit()
		if err != nil {
			return c.submitFailed(err)
		}
		fmt.Fprintln(c.stdout, id)
		return exitOK
	}
	rw, err := client.Watch(c.ctx, job.ID)
	if err != nil {
		c.errorf("%v", err)
		return exitUnavailable
	}
	defer rw.Stop()
	if _, err := submit(); err != nil {
		return c.submitFailed(err)
	}
	return c.await(rw, job.ID)
}

func (c *cli) submitFailed(err error) int {
	switch {
	case errors.Is(err, jobs.ErrInvalidJob):
		c.errorf("%v", err)
		return exitUsage
	case errors.Is(err, jobs.ErrQueueFull):
		c.errorf("the queue is full; nothing was queued: try again later, or wait for room with --wait-room D (%v)", err)
	default:
		c.errorf("%v", err)
	}
	return exitUnavailable
}

// await waits on an open watch and reports the result.
func (c *cli) await(rw *jobs.ResultWatch, id string) int {
	res, err := rw.Next(c.ctx)
	if err != nil {
		if c.ctx.Err() != nil {
			c.errorf("interrupted; job %s goes on: submit wait %s", id, id)
			return exitInterrupted
		}
		c.errorf("wait for %s: %v", id, err)
		return exitUnavailable
	}
	return c.report(res)
}

// report prints a result (the job's output, or the Result as JSON) and
// returns the exit code of its status.
func (c *cli) report(res *jobs.Result) int {
	if c.json {
		data, _ := json.Marshal(res)
		fmt.Fprintf(c.stdout, "%s\n", data)
		return res.ExitCode()
	}
	io.WriteString(c.stdout, res.Stdout)
	io.WriteString(c.stderr, res.Stderr)
	switch res.Status {
	case jobs.StatusSucceeded, jobs.StatusFailed:
	default:
		msg := fmt.Sprintf("job %s: %s", res.ID, res.Status)
		if res.Error != "" {
			msg += ": " + res.Error
		}
		c.errorf("%s", msg)
	}
	return res.ExitCode()
}

func (c *cli) idCommand(name string, args []string, fn func(*jobs.Client, string) int) int {
	fs := c.newFlagSet(name, name+" ID [--json]")
	c.commonFlags(fs)
	pos, exit, done := c.parseOrExit(fs, args)
	if done {
		return exit
	}
	if len(pos) != 1 {
		c.errorf("%s takes one job ID", name)
		fs.Usage()
		return exitUsage
	}
	client, closeConn, exit := c.connect()
	if closeConn == nil {
		return exit
	}
	defer closeConn()
	return fn(client, pos[0])
}

func (c *cli) get(client *jobs.Client, id string) int {
	res, err := client.Get(c.ctx, id)
	if err == nil {
		return c.report(res)
	}
	if !errors.Is(err, jobs.ErrNotFound) {
		c.errorf("%v", err)
		return exitUnavailable
	}
	queued, qerr := client.Queued(c.ctx, id)
	if qerr != nil {
		c.errorf("%v", qerr)
		return exitUnavailable
	}
	if queued {
		c.errorf("job %s is queued or running; no result yet (submit wait %s)", id, id)
		return exitPending
	}
	c.errorf("no job %s: no result and nothing queued (results are kept 24h)", id)
	return exitNotFound
}

func (c *cli) wait(client *jobs.Client, id string) int {
	if !jobs.ValidID(id) {
		c.errorf("no job %q: IDs match [A-Za-z0-9_-]{1,128}", id)
		return exitNotFound
	}
	rw, err := client.Watch(c.ctx, id)
	if err != nil {
		c.errorf("%v", err)
		return exitUnavailable
	}
	defer rw.Stop()
	// Opened the watch first: a job finishing now is not missed, and one
	// that is neither stored nor queued is unknown.
	if _, err := client.Get(c.ctx, id); errors.Is(err, jobs.ErrNotFound) {
		queued, err := client.Queued(c.ctx, id)
		if err != nil {
			c.errorf("%v", err)
			return exitUnavailable
		}
		if !queued {
			if _, err := client.Get(c.ctx, id); errors.Is(err, jobs.ErrNotFound) {
				c.errorf("no job %s: no result and nothing queued", id)
				return exitNotFound
			}
		}
	}
	return c.await(rw, id)
}

func (c *cli) cancel(client *jobs.Client, id string) int {
	res, err := client.Cancel(c.ctx, id)
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		c.errorf("no job %s to cancel", id)
		return exitNotFound
	case errors.Is(err, jobs.ErrCancelPending):
		// Recorded, not yet final: a fleet's submitter may not store the
		// result itself, and no worker took the job within CancelWait.
		msg := fmt.Sprintf("cancel of %s requested; it will finish as canceled when a worker takes it (submit wait %s)", id, id)
		if c.json {
			c.errorf("%s", msg) // stdout carries Result objects only
		} else {
			fmt.Fprintln(c.stdout, msg)
		}
		return exitOK
	case errors.Is(err, jobs.ErrFinished):
		c.errorf("job %s already finished: %s", id, res.Status)
		if c.json {
			data, _ := json.Marshal(res)
			fmt.Fprintf(c.stdout, "%s\n", data)
		}
		return exitNotFound
	case err != nil:
		c.errorf("%v", err)
		return exitUnavailable
	}
	if c.json {
		data, _ := json.Marshal(res)
		fmt.Fprintf(c.stdout, "%s\n", data)
	} else {
		fmt.Fprintf(c.stdout, "canceled %s\n", id)
	}
	return exitOK
}
