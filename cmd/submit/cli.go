package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/internal/natsconn"
	"github.com/sandfleet/sandfleet/internal/natscreds"
	"github.com/sandfleet/sandfleet/internal/natsurl"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// Exit codes of submit besides the status table of docs/design.md (which run,
// get and wait exit with once they have a result).
const (
	exitOK          = 0
	exitNotFound    = 1   // get, wait, cancel, logs, artifacts: no job with this ID; cancel: already finished; workspace: none such
	exitUsage       = 2   // bad command line or invalid job (as the rejected status)
	exitPending     = 75  // get, logs: the job is queued or running, no result yet (EX_TEMPFAIL)
	exitUnavailable = 125 // NATS unreachable, queue full (as the error status)
	exitInterrupted = 130 // interrupted while waiting; the job goes on
)

// version is set at build time with -ldflags "-X main.version=..."; when
// it is not, cmdline.Version reads what the Go toolchain recorded.
var version string

const usageText = `usage: submit [--nats URL] [--credentials FILE] <command> [flags] [args]
       submit --version

Sends jobs to a sandfleet fleet and reads their results.

Commands:
  run [-c CODE | FILE | -] [flags]   run a job and print its output (exits as the job)
  get ID [--json]                    print a stored result
  wait ID [--json]                   wait for a job's result
  cancel ID [--json]                 cancel a queued or running job
  logs ID [-f] [--json]              replay a job's output from its start; -f follows it
  batch FILE.jsonl [-o OUT] [flags]  run a file of jobs, resumable
  status [--json]                    show the workers and each queue's backlog
  workspace ls|show|rm|get [NAME]    list, show, remove or download workspaces
  artifacts ID [-O DIR]              list (and download) the files a job returned
  session create|ls|get|exec|run|cp|rm
                                     long-lived sandboxes: commands, Python, files
  mcp [--url URL]                    serve the tools (run_code) to an MCP client on stdio
  template add|ls|show|rm [NAME]     the fleet's templates: images with commands, limits, start and ready
  help [COMMAND]                     this text, or a command's

Global flags (before or after the command):
%s
Flags and arguments may come in any order; "--" ends the flags.
"submit <command> --help" explains a command and lists its flags.

Exit codes of run, get, wait and logs, from the job's status:
  succeeded 0, failed the job's exit code, compile_error 65, timeout 124,
  oom 137, output_limit 1, canceled 130, rejected 2, error 125.
Other exit codes:
  1   get/wait/cancel/logs/artifacts: no job with this ID; cancel: the job
      already finished; workspace: no such workspace or revision, or a refused
      snapshot (by the rules or its digest)
  2   usage error, or a job submit refuses as invalid
  75  get, artifacts, logs without -f: the job is queued or running, no result yet
      (as a tenant, which cannot read the queue, also for an unknown ID)
  125 NATS unreachable, or the queue is full
  130 interrupted while waiting (the job goes on: submit logs -f ID); batch:
      interrupted, the command to resume is printed
`

// Main is the submit command line: its streams, and how it tells a
// terminal from a pipe.
type Main struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// IsTerminal reports whether w is a terminal: job output written to one
	// has its control characters shown (see visible) unless --raw, and
	// batch redraws its progress line in place. Default: isTerminal.
	IsTerminal func(w io.Writer) bool

	natsURL string   // --nats, a global flag
	creds   string   // --credentials, a global flag
	tenant  string   // --tenant, a global flag
	args    []string // the command line, for batch's resume command
}

// NewMain returns a Main on the process's standard streams.
func NewMain() *Main {
	return &Main{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, IsTerminal: isTerminal}
}

// command is one subcommand, litestream-style: a struct that defines its
// own flags and runs with the arguments left after them.
type command interface {
	// synopsis is the usage line after "submit ", about what the command
	// does, for its --help.
	synopsis() string
	about() string
	define(fs *pflag.FlagSet)
	run(ctx context.Context, fs *pflag.FlagSet) error
}

func (m *Main) command(name string) command {
	switch name {
	case "run":
		return &runCommand{m: m}
	case "get", "wait", "cancel":
		return &idCommand{m: m, name: name}
	case "batch":
		return &batchCommand{m: m}
	case "logs":
		return &logsCommand{m: m}
	case "status":
		return &statusCommand{m: m}
	case "workspace":
		return &workspaceCommand{m: m}
	case "artifacts":
		return &artifactsCommand{m: m}
	case "session":
		return &sessionCommand{m: m}
	case "mcp":
		return &mcpCommand{m: m}
	case "template":
		return &templateCommand{m: m}
	}
	return nil
}

// globalFlags returns a set of the flags every command takes, before or
// after its name.
func (m *Main) globalFlags() *pflag.FlagSet {
	fs := cmdline.NewFlagSet("submit")
	fs.StringVar(&m.natsURL, "nats", "", natsconn.URLHelp)
	fs.StringVar(&m.creds, "credentials", os.Getenv(envCredentials), "`FILE` of USER:PASSWORD, or a NATS credentials file, to connect with (default $"+envCredentials+"; with the default URL, ./"+defaultCredentials+" when it is there: what worker --embedded writes in its --data-dir)")
	fs.StringVar(&m.tenant, "tenant", os.Getenv("SANDFLEET_TENANT"), "act as tenant `NAME` of the fleet (its credentials in the URL): job IDs and workspaces become NAME.<id>, NAME.<workspace>; default $SANDFLEET_TENANT")
	return fs
}

// Run runs the submit command line. Its error, if any, says how submit
// ends: exitCode turns it into an exit code and a message.
func (m *Main) Run(ctx context.Context, args []string) error {
	if m.IsTerminal == nil {
		m.IsTerminal = isTerminal
	}
	m.args = args
	global := m.globalFlags()
	root := cmdline.NewFlagSet("submit")
	root.AddFlagSet(global)
	root.SetInterspersed(false) // the global flags end at the command
	showVersion := root.Bool("version", false, "print the version and exit")
	err := cmdline.Parse(root, args)
	if errors.Is(err, cmdline.ErrHelp) {
		fmt.Fprintf(m.Stdout, usageText, cmdline.Usages(global))
		return err
	}
	if err != nil {
		return &exitError{code: exitUsage, err: err, help: "submit"}
	}
	if *showVersion {
		fmt.Fprintln(m.Stdout, "submit", cmdline.Version(version))
		return nil
	}
	if root.NArg() == 0 {
		fmt.Fprintf(m.Stderr, usageText, cmdline.Usages(global))
		return &exitError{code: exitUsage}
	}
	name, rest := root.Arg(0), root.Args()[1:]
	if name == "help" {
		return m.help(rest, global)
	}
	c := m.command(name)
	if c == nil {
		return &exitError{code: exitUsage, err: cmdline.Usagef("unknown command %q", name), help: "submit"}
	}
	fs := cmdline.NewFlagSet("submit " + name)
	c.define(fs)
	fs.AddFlagSet(global)
	switch err := cmdline.Parse(fs, rest); {
	case errors.Is(err, cmdline.ErrHelp):
		m.writeHelp(m.Stdout, c, fs, global)
		return err
	case err != nil:
		return &exitError{code: exitUsage, err: err, help: name}
	}
	return c.run(ctx, fs)
}

// help is "submit help [COMMAND]".
func (m *Main) help(args []string, global *pflag.FlagSet) error {
	if len(args) == 0 {
		fmt.Fprintf(m.Stdout, usageText, cmdline.Usages(global))
		return cmdline.ErrHelp
	}
	c := m.command(args[0])
	if c == nil || len(args) > 1 {
		return &exitError{code: exitUsage, err: cmdline.Usagef("help takes one command, got %q", args), help: "submit"}
	}
	fs := cmdline.NewFlagSet("submit " + args[0])
	c.define(fs)
	m.writeHelp(m.Stdout, c, fs, global)
	return cmdline.ErrHelp
}

func (m *Main) writeHelp(w io.Writer, c command, fs, global *pflag.FlagSet) {
	own := cmdline.NewFlagSet("")
	fs.VisitAll(func(f *pflag.Flag) {
		if global.Lookup(f.Name) == nil {
			own.AddFlag(f)
		}
	})
	fmt.Fprintf(w, "usage: submit %s\n\n%s\nFlags:\n%s\nGlobal flags:\n%s", c.synopsis(), c.about(), cmdline.Usages(own), cmdline.Usages(global))
}

// exitError ends submit with an exit code other than 0.
type exitError struct {
	code int
	// err is printed as "submit: err"; nil when all was said already
	// (a job's own exit code, a usage text printed).
	err error
	// help, on a usage error, names the command whose --help to point
	// to ("submit" for submit's own).
	help string
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// exitWith ends submit with code and no message.
func exitWith(code int) error {
	if code == exitOK {
		return nil
	}
	return &exitError{code: code}
}

// fail ends submit with code and a message.
func fail(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

// usageError is a usage error of the command name.
func usageError(name, format string, args ...any) error {
	return &exitError{code: exitUsage, err: cmdline.Usagef(format, args...), help: name}
}

// exitCode prints what err says on stderr and returns submit's exit code.
func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, cmdline.ErrHelp) {
		return exitOK
	}
	var e *exitError
	if !errors.As(err, &e) {
		e = &exitError{code: exitUnavailable, err: err}
		if errors.Is(err, cmdline.ErrUsage) {
			e.code = exitUsage
		}
	}
	if e.err != nil {
		fmt.Fprintf(stderr, "submit: %v\n", e.err)
	}
	switch e.help {
	case "":
	case "submit":
		fmt.Fprintln(stderr, `run "submit --help" for the commands`)
	default:
		fmt.Fprintf(stderr, "run \"submit %s --help\" for the flags\n", e.help)
	}
	return e.code
}

// warnf prints a message on stderr that does not end submit.
func (m *Main) warnf(format string, args ...any) {
	fmt.Fprintf(m.Stderr, "submit: "+format+"\n", args...)
}

// envCredentials names the environment variable of --credentials.
const envCredentials = "SANDFLEET_NATS_CREDENTIALS"

// defaultCredentials is where the credentials of `worker --embedded`, run
// with its default --data-dir in this directory (make run), are.
var defaultCredentials = filepath.Join("data", natscreds.File)

// credentials returns the options that connect to url with --credentials,
// or, when url is the default one, which worker --embedded serves, with
// its credentials in ./data if they are there.
func (m *Main) credentials(url string) ([]nats.Option, error) {
	path := m.creds
	if path == "" {
		if url != nats.DefaultURL {
			return nil, nil
		}
		if _, err := os.Stat(defaultCredentials); err != nil {
			return nil, nil
		}
		path = defaultCredentials
	} else if strings.Contains(url, "@") {
		return nil, usageError("", "--credentials and a user in --nats or $%s exclude each other", natsconn.EnvURL)
	}
	opt, err := natscreds.Option(path)
	if err != nil {
		return nil, usageError("", "--credentials: %v", err)
	}
	return []nats.Option{opt}, nil
}

// dial connects to --nats with the credentials (and a tenant's options)
// every command uses.
func (m *Main) dial() (*nats.Conn, jetstream.JetStream, error) {
	url := natsconn.ServerURL(m.natsURL)
	cfg := natsconn.Config{URL: url, Name: "sandfleet-submit"}
	var err error
	if cfg.Extra, err = m.credentials(url); err != nil {
		return nil, nil, err
	}
	if m.tenant != "" {
		if !jobs.ValidTenant(m.tenant) {
			return nil, nil, usageError("", "--tenant %q must match [a-z0-9][a-z0-9-]{0,31}", m.tenant)
		}
		cfg.Extra = append(cfg.Extra, jobs.TenantOptions(m.tenant)...)
	}
	nc, js, err := natsconn.JetStream(cfg)
	if errors.Is(err, nats.ErrAuthorization) {
		return nil, nil, fail(exitUnavailable, "%w (the server wants credentials: --credentials FILE, or a user in --nats / NATS_URL; worker --embedded writes them to DATA-DIR/%s)", err, natscreds.File)
	}
	if err != nil {
		return nil, nil, fail(exitUnavailable, "%w (start a worker with --embedded, or set --nats / NATS_URL)", err)
	}
	return nc, js, nil
}

// connect opens the job client on --nats; close closes its connection.
func (m *Main) connect(ctx context.Context) (client *jobs.Client, close func(), err error) {
	nc, js, err := m.dial()
	if err != nil {
		return nil, nil, err
	}
	if m.tenant != "" {
		// A tenant may not read the topology: nothing to open.
		client, err = jobs.NewTenantClient(js, m.tenant, jobs.Config{})
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		return client, nc.Close, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	client, err = jobs.NewClient(ctx, js, jobs.Config{})
	if err != nil {
		nc.Close()
		url := natsconn.ServerURL(m.natsURL)
		return nil, nil, fail(exitUnavailable, "open the job stream at %s: %w", natsurl.Redact(url), natsurl.Error(err, url))
	}
	return client, nc.Close, nil
}

// output is how a command that prints results prints them: --json and
// --raw.
type output struct {
	m    *Main
	json bool
	raw  bool
	// then, when set, runs on the result a watch ends with, after its
	// output (run's artifact download).
	then func(*jobs.Result) error
}

func (o *output) define(fs *pflag.FlagSet, jsonUsage string, jobOutput bool) {
	fs.BoolVar(&o.json, "json", false, jsonUsage)
	if jobOutput {
		fs.BoolVar(&o.raw, "raw", false, "write the job's output unchanged, also to a terminal (where its control characters are otherwise shown, ESC as ^[, not acted on)")
	}
}

// text writes s, which a job (or a worker) chose, to w: as it is, unless
// w is a terminal and not --raw.
func (o *output) text(w io.Writer, s string) {
	if !o.raw && o.m.IsTerminal(w) {
		s = visible(s)
	}
	io.WriteString(w, s)
}

// printJSON writes v as one line of JSON on stdout.
func (o *output) printJSON(v any) {
	data, _ := json.Marshal(v)
	if !o.raw && o.m.IsTerminal(o.m.Stdout) {
		data = visibleJSON(data)
	}
	fmt.Fprintf(o.m.Stdout, "%s\n", data)
}

// kvFlag collects repeated NAME=VALUE flags.
type kvFlag struct {
	m    map[string]string
	what string
}

func (f *kvFlag) String() string { return "" }
func (f *kvFlag) Type() string   { return f.what }
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
