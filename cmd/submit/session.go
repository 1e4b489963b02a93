package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/pflag"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// sessionCommand is "submit session": long-lived sandboxes.
type sessionCommand struct {
	m   *Main
	out output

	image         string
	idle, life    time.Duration
	env           kvFlag
	memory, tmpfs limits.Size
	cpus          float64
	cwd           string
	timeout       time.Duration
	background    bool
	exclusive     bool
	code          string
	context       string
	language      string
	persist       bool
	workspace     string
	egress        []string
}

func (c *sessionCommand) synopsis() string {
	return "session create | ls | get ID | cells ID | contexts ID [new | rm NAME] | exec ID [flags] -- CMD... | run ID [-c CODE | FILE | -] | cp SRC DST | expose ID PORT | ports ID | unexpose ID PORT | network ID POLICY | pause ID | resume ID | fork ID | attach ID | rm ID"
}

func (c *sessionCommand) about() string {
	return `A session is a sandbox that lives across calls: the same hardened
container as a job's, held by one worker until it is removed, idle for its
idle timeout (default 5m) or at its maximum lifetime (default 1h).

  create             start one (--image, --idle-timeout, --max-lifetime, --env,
                     --memory, --cpus, --tmpfs); prints its ID
  ls                 the sessions, running first
  get ID             one session's record: where it runs, or why it ended
  cells ID           its recent cells, oldest first, as its worker keeps them
                     (the last 20; an ended session's for 15m): each one's
                     code, output, value or error, and its figures' sizes
  contexts ID        its code contexts: name, language, cells run, age and the
                     directory each one is in now; contexts ID new starts one
                     (--language, --context NAME, --cwd DIR) and prints its
                     name; contexts ID rm NAME ends one
  exec ID -- CMD...  run a command in it; prints its output and exits as it
                     does (--cwd, --env, --timeout; --background prints its pid;
                     --exclusive kills the session's other processes first,
                     so that none can touch its output: for a verifier)
  run ID [-c CODE | FILE | -]
                     run a cell in its stateful context (--language python,
                     javascript, typescript or bash; --context NAME): globals
                     (a shell's cwd and variables) stay for the next run;
                     prints the output, then the value of a trailing
                     expression; an exception exits 1, a bash cell as it did
  cp SRC DST         copy a file in or out: one side is ID:PATH
  expose ID PORT     let its server on 127.0.0.1:PORT be reached through the
                     gateway (/v1/sessions/ID/ports/PORT/); prints the ports
  ports ID           the ports it exposes
  unexpose ID PORT   stop exposing one; its open connections are closed
  network ID POLICY  replace its egress policy while it runs, within the
                     worker's caps: none (lock it after the installs), a
                     JSON limits.network, or rules (a.org,*.b.org)
  pause ID           checkpoint a --persist session and free its sandbox
  resume ID          start a paused one again from its checkpoint (any worker)
  fork ID            start a new session from its latest checkpoint; prints
                     the new ID
  attach ID          a shell in it on this terminal (raw mode, resized with it;
                     restored on exit); exits as the shell does
  rm ID              end it

With --persist (or --workspace NAME) /workspace is checkpointed into a
workspace at idle points and on pause and rm; a call to a session whose
worker was lost resumes it on another worker from there (files back,
processes and interpreters' memory gone; its record's "restored" says so).

Exits 1 for an unknown or ended session, 125 when no worker has room.
`
}

func (c *sessionCommand) define(fs *pflag.FlagSet) {
	c.out = output{m: c.m}
	c.out.define(fs, "print the answers as JSON", true)
	fs.StringVar(&c.image, "image", "python", "create: the preset `NAME`")
	fs.DurationVar(&c.idle, "idle-timeout", 0, "create: end it after `D` without a call (default 5m)")
	fs.DurationVar(&c.life, "max-lifetime", 0, "create: end it `D` after its start (default 1h)")
	c.env.what = "NAME=VALUE"
	fs.Var(&c.env, "env", "create, exec: set `NAME=VALUE` (repeatable)")
	fs.Var(cmdline.Value(&c.memory, "size"), "memory", "create: `SIZE` of RAM")
	fs.Var(cmdline.Value(&c.tmpfs, "size"), "tmpfs", "create: `SIZE` of /workspace and /tmp")
	fs.Float64Var(&c.cpus, "cpus", 0, "create: `N` CPUs")
	fs.StringVar(&c.cwd, "cwd", "", "exec: run in `DIR`; contexts new: start it there")
	fs.DurationVar(&c.timeout, "timeout", 0, "exec, run: stop it after `D` (default the session's timeout)")
	fs.BoolVar(&c.background, "background", false, "exec: start it in the background and print its pid")
	fs.BoolVar(&c.exclusive, "exclusive", false, "exec: kill every other process of the session first and start none until it ends, so that no other process can write into its output (for a verifier)")
	fs.StringVarP(&c.code, "code", "c", "", "run: the `CODE` to run")
	fs.StringVar(&c.context, "context", "", "run, contexts new: the context `NAME` (default \"default\" for python, the language's name for the others)")
	fs.StringVar(&c.language, "language", "", "run, contexts new: the context's `LANGUAGE`: python (default), javascript, typescript or bash")
	fs.BoolVar(&c.persist, "persist", false, "create: checkpoint /workspace, so that the session survives its sandbox")
	fs.StringVar(&c.workspace, "workspace", "", "create: persist in the workspace `NAME` (default one named as the session)")
	fs.StringArrayVar(&c.egress, "egress", nil, "create: allow egress to `RULE`: a host (*.example.org), an IP or CIDR, with an optional :PORT (repeatable; within the worker's --egress-allow); session network changes it later")
}

func (c *sessionCommand) run(ctx context.Context, fs *pflag.FlagSet) error {
	args := fs.Args()
	if len(args) == 0 {
		return usageError("session", "session takes create, ls, get, cells, contexts, exec, run, cp, expose, ports, unexpose, network, pause, resume, fork, attach or rm")
	}
	verb, args := args[0], args[1:]
	want := map[string][2]int{"create": {0, 0}, "ls": {0, 0}, "get": {1, 1}, "cells": {1, 1}, "contexts": {1, 3}, "rm": {1, 1}, "exec": {2, -1}, "run": {1, 2}, "cp": {2, 2},
		"pause": {1, 1}, "resume": {1, 1}, "fork": {1, 1}, "attach": {1, 1}, "network": {2, 2},
		"expose": {2, 2}, "ports": {1, 1}, "unexpose": {2, 2}}
	n, ok := want[verb]
	switch {
	case !ok:
		return usageError("session", "unknown session command %q (create, ls, get, cells, contexts, exec, run, cp, expose, ports, unexpose, network, pause, resume, fork, attach, rm)", verb)
	case len(args) < n[0] || (n[1] >= 0 && len(args) > n[1]):
		return usageError("session", "session %s: wrong number of arguments %q", verb, args)
	}
	var policy *limits.Network
	if verb == "network" {
		var err error
		if policy, err = parsePolicy(args[1]); err != nil {
			return usageError("session", "session network: %v", err)
		}
	}
	if verb == "create" && len(c.egress) > 0 {
		policy = &limits.Network{}
		for _, e := range c.egress {
			r, err := limits.ParseRule(e)
			if err != nil {
				return usageError("session", "--egress: %v", err)
			}
			policy.Allow = append(policy.Allow, r)
		}
	}
	client, closeConn, err := c.m.connectSessions(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	switch verb {
	case "create":
		return c.create(ctx, client, policy)
	case "network":
		info, err := client.SetNetwork(ctx, args[0], policy)
		if err != nil {
			return sessionFailed(err)
		}
		if c.out.json {
			c.out.printJSON(info)
		}
		return nil
	case "ls":
		return c.ls(ctx, client)
	case "get":
		info, err := client.Get(ctx, args[0])
		if err != nil {
			return sessionFailed(err)
		}
		c.out.printJSON(info)
		return nil
	case "cells":
		return c.cells(ctx, client, args[0])
	case "contexts":
		return c.contexts(ctx, client, args[0], args[1:])
	case "expose", "ports", "unexpose":
		return c.ports(ctx, client, verb, args)
	case "rm":
		if _, err := client.Delete(ctx, args[0]); err != nil {
			return sessionFailed(err)
		}
		return nil
	case "pause", "resume", "fork":
		return c.lifecycle(ctx, client, verb, args[0])
	case "exec":
		return c.exec(ctx, client, args[0], args[1:])
	case "run":
		return c.runCode(ctx, client, args[0], args[1:])
	case "attach":
		return c.attach(ctx, client, args[0])
	}
	return c.cp(ctx, client, args[0], args[1])
}

// connectSessions connects as connect does (the same credentials) and
// returns a sessions client.
func (m *Main) connectSessions(ctx context.Context) (*sessions.Client, func(), error) {
	if m.tenant != "" {
		return nil, nil, usageError("", "--tenant: sessions over NATS are the operator's; a tenant's sessions go through the gateway (SANDFLEET_URL and a tenant's token)")
	}
	nc, js, err := m.dial()
	if err != nil {
		return nil, nil, err
	}
	client, err := sessions.NewClient(ctx, js, "")
	if err != nil {
		nc.Close()
		return nil, nil, fail(exitUnavailable, "%w", err)
	}
	return client, nc.Close, nil
}

func sessionFailed(err error) error {
	switch {
	case errors.Is(err, sessionapi.ErrNotFound), errors.Is(err, sessionapi.ErrGone):
		return fail(exitNotFound, "%s", sessionapi.AsError(err).Message)
	case errors.Is(err, sessionapi.ErrInvalid), errors.Is(err, sessionapi.ErrPaused):
		return fail(exitUsage, "%s", sessionapi.AsError(err).Message)
	case errors.Is(err, sessionapi.ErrFull):
		return fail(exitUnavailable, "%s; try again later", sessionapi.AsError(err).Message)
	}
	if e := sessionapi.AsError(err); e != nil {
		return fail(exitUnavailable, "%s", e.Message)
	}
	return fail(exitUnavailable, "%w", err)
}

func (c *sessionCommand) create(ctx context.Context, client *sessions.Client, network *limits.Network) error {
	spec := sessions.Spec{Image: c.image, Env: c.env.m, IdleTimeout: limits.Duration(c.idle), MaxLifetime: limits.Duration(c.life),
		Limits: limits.Limits{Memory: c.memory, Tmpfs: c.tmpfs, CPUs: c.cpus, Network: network}, Persist: c.persist, Workspace: c.workspace}
	info, err := client.Create(ctx, spec)
	if err != nil {
		return sessionFailed(err)
	}
	if c.out.json {
		c.out.printJSON(info)
		return nil
	}
	fmt.Fprintln(c.m.Stdout, info.ID)
	return nil
}

// lifecycle pauses, resumes or forks session id; a fork prints its ID.
func (c *sessionCommand) lifecycle(ctx context.Context, client *sessions.Client, verb, id string) error {
	var info *sessions.Info
	var err error
	switch verb {
	case "pause":
		info, err = client.Pause(ctx, id)
	case "resume":
		info, err = client.Resume(ctx, id)
	default:
		info, err = client.Fork(ctx, id, sessions.ForkRequest{})
	}
	if err != nil {
		return sessionFailed(err)
	}
	switch {
	case c.out.json:
		c.out.printJSON(info)
	case verb == "fork":
		fmt.Fprintln(c.m.Stdout, info.ID)
	}
	return nil
}

func (c *sessionCommand) ls(ctx context.Context, client *sessions.Client) error {
	list, err := client.List(ctx)
	if err != nil {
		return sessionFailed(err)
	}
	if c.out.json {
		if list == nil {
			list = []sessions.Info{}
		}
		c.out.printJSON(list)
		return nil
	}
	tw := tabwriter.NewWriter(c.m.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tIMAGE\tWORKER\tAGE\tIDLE")
	now := time.Now()
	for _, s := range list {
		status := s.Status
		if s.EndReason != "" {
			status += " (" + s.EndReason + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, status, s.Image, s.Worker, ago(now, s.CreatedAt), ago(now, s.ActiveAt))
	}
	if len(list) == 0 {
		fmt.Fprintln(tw, "(no sessions)")
	}
	return tw.Flush()
}

// cells prints session id's history: a header a cell, its code
// indented, then what it printed, its value or error, and its figures.
func (c *sessionCommand) cells(ctx context.Context, client *sessions.Client, id string) error {
	h, err := client.Cells(ctx, id)
	if err != nil {
		return sessionFailed(err)
	}
	if c.out.json {
		c.out.printJSON(h)
		return nil
	}
	w := c.m.Stdout
	if h.Dropped > 0 {
		fmt.Fprintf(w, "(%d earlier cells no longer kept)\n", h.Dropped)
	}
	if len(h.Cells) == 0 {
		fmt.Fprintln(w, "(no cells)")
	}
	indent := func(s string) string {
		return "    " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n    ") + "\n"
	}
	for _, cell := range h.Cells {
		head := fmt.Sprintf("[%d] %s %dms", cell.Seq, cell.At.UTC().Format(time.RFC3339), cell.DurationMS)
		if cell.Context != "" {
			head += " context " + cell.Context
		}
		if cell.TimedOut {
			head += " timed out"
		}
		if cell.Cut {
			head += " (cut)"
		}
		fmt.Fprintln(w, head)
		c.out.text(w, indent(cell.Code))
		if cell.Stdout != "" {
			c.out.text(w, indent(cell.Stdout))
		}
		if cell.Stderr != "" {
			c.out.text(w, indent(cell.Stderr))
		}
		switch {
		case cell.Error != nil:
			c.out.text(w, "  ! "+cell.Error.Name+": "+cell.Error.Value+"\n")
		case cell.Text != "":
			c.out.text(w, "  = "+strings.ReplaceAll(cell.Text, "\n", "\n    ")+"\n")
		}
		for _, d := range cell.Display {
			c.out.text(w, fmt.Sprintf("  [figure %s %dx%d]\n", d.MIME, d.Width, d.Height))
		}
		if cell.DisplayDropped > 0 {
			fmt.Fprintf(w, "  (%d display outputs not kept)\n", cell.DisplayDropped)
		}
	}
	return nil
}

func decoded(text, encoding string) string {
	if encoding == "base64" {
		b, _ := base64.StdEncoding.DecodeString(text)
		return string(b)
	}
	return text
}

func (c *sessionCommand) exec(ctx context.Context, client *sessions.Client, id string, argv []string) error {
	req := sessionapi.ExecRequest{Cmd: argv, Cwd: c.cwd, Env: c.env.m, Timeout: limits.Duration(c.timeout), Background: c.background,
		Exclusive: c.exclusive}
	res, err := client.Exec(ctx, id, uuid.NewString(), req)
	if err != nil {
		return sessionFailed(err)
	}
	if c.out.json {
		c.out.printJSON(res)
		return nil
	}
	if c.background {
		fmt.Fprintln(c.m.Stdout, res.PID)
		return nil
	}
	c.out.text(c.m.Stdout, decoded(res.Stdout, res.StdoutEncoding))
	c.out.text(c.m.Stderr, decoded(res.Stderr, res.StderrEncoding))
	if res.TimedOut {
		return fail(124, "the command timed out")
	}
	if res.ExitCode != nil {
		return exitWith(*res.ExitCode)
	}
	return nil
}

func (c *sessionCommand) runCode(ctx context.Context, client *sessions.Client, id string, args []string) error {
	code := c.code
	switch {
	case code != "" && len(args) > 0:
		return usageError("session", "session run: give -c CODE or FILE, not both")
	case len(args) == 1 && args[0] == "-":
		b, err := io.ReadAll(c.m.Stdin)
		if err != nil {
			return fail(exitUsage, "read stdin: %w", err)
		}
		code = string(b)
	case len(args) == 1:
		b, err := os.ReadFile(args[0])
		if err != nil {
			return usageError("session", "%v", err)
		}
		code = string(b)
	case code == "":
		return usageError("session", "session run needs -c CODE, FILE or -")
	}
	res, err := client.RunCode(ctx, id, uuid.NewString(), sessionapi.CodeRequest{Code: code, Context: c.context, Language: c.language, Timeout: limits.Duration(c.timeout)})
	if err != nil {
		return sessionFailed(err)
	}
	if c.out.json {
		c.out.printJSON(res)
		return nil
	}
	c.out.text(c.m.Stdout, decoded(res.Stdout, res.StdoutEncoding))
	c.out.text(c.m.Stderr, decoded(res.Stderr, res.StderrEncoding))
	if res.Text != "" {
		c.out.text(c.m.Stdout, res.Text+"\n")
	}
	if res.Error != nil {
		c.out.text(c.m.Stderr, res.Error.Traceback)
		if e := res.ExitCode; e != nil && *e > 0 && *e < 256 { // a bash cell's own status
			return exitWith(*e)
		}
		return exitWith(1)
	}
	return nil
}

// cp copies a file into (DST is ID:PATH) or out of (SRC is) a session.
func (c *sessionCommand) cp(ctx context.Context, client *sessions.Client, src, dst string) error {
	sid, spath, sIn := strings.Cut(src, ":")
	did, dpath, dIn := strings.Cut(dst, ":")
	switch {
	case sIn == dIn:
		return usageError("session", "session cp: one of SRC and DST is ID:PATH, the other a local file")
	case dIn:
		f, err := os.Open(src)
		if err != nil {
			return usageError("session", "%v", err)
		}
		defer f.Close()
		mode := uint32(0o644)
		if st, err := f.Stat(); err == nil {
			mode = uint32(st.Mode().Perm())
		}
		if _, err := client.WriteFile(ctx, did, uuid.NewString(), dpath, mode, f); err != nil {
			return sessionFailed(err)
		}
		return nil
	}
	// Out: beside the target, renamed over it once whole.
	tmp, err := os.CreateTemp(dirOf(dst), ".sandfleet-cp-*")
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := client.ReadFile(ctx, sid, spath, tmp); err != nil {
		tmp.Close()
		return sessionFailed(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(exitUnavailable, "%v", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fail(exitUnavailable, "%v", err)
	}
	return nil
}

func dirOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i+1]
	}
	return "."
}
