package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandfleet/sandfleet/internal/archive"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// workspaceFlags are run's flags for a job's workspace and outputs.
type workspaceFlags struct {
	name, from string
	outputs    []string
	dir        string // -O: where the artifacts go
}

func (f *workspaceFlags) define(fs *pflag.FlagSet) {
	fs.StringVar(&f.name, "workspace", "", "run in workspace `NAME`: its files before, its next revision after")
	fs.StringVar(&f.from, "workspace-from", "", "start from workspace `NAME[@REV]` (with --workspace: a new workspace forked from it; alone: a copy, not kept)")
	fs.StringArrayVar(&f.outputs, "outputs", nil, "return the files matching `GLOB` as artifacts (repeatable; *.png, results/**)")
	fs.StringVarP(&f.dir, "out-dir", "O", "", "write the job's artifacts into `DIR` (with --outputs)")
}

// apply puts the flags into job.
func (f *workspaceFlags) apply(job *jobs.Job) error {
	job.Workspace, job.Outputs = f.name, f.outputs
	if f.from != "" {
		ref, err := jobs.ParseWorkspaceRef(f.from)
		if err != nil {
			return err
		}
		job.WorkspaceFrom = &ref
	}
	if f.dir != "" && len(f.outputs) == 0 {
		return errors.New("-O DIR takes the files that --outputs GLOB names: give --outputs")
	}
	return nil
}

// download writes res's artifacts into -O DIR, and says on stderr what it
// wrote and what the worker skipped.
func (f *workspaceFlags) download(ctx context.Context, m *Main, client *jobs.Client, res *jobs.Result) error {
	if f.dir == "" {
		return nil
	}
	return downloadArtifacts(ctx, m, client, res, f.dir)
}

func downloadArtifacts(ctx context.Context, m *Main, client *jobs.Client, res *jobs.Result, dir string) error {
	out := output{m: m}
	if err := client.DownloadArtifacts(ctx, res.Artifacts, dir); err != nil {
		return fail(exitUnavailable, "artifacts of %s: %w", res.ID, err)
	}
	var msg strings.Builder
	fmt.Fprintf(&msg, "submit: %d artifacts of %s written to %s\n", len(res.Artifacts), res.ID, dir)
	for _, s := range res.ArtifactsSkipped {
		fmt.Fprintf(&msg, "submit: skipped %s (%s): %s\n", s.Name, limits.Size(s.Size), s.Reason)
	}
	if res.ArtifactsError != "" {
		fmt.Fprintf(&msg, "submit: %s\n", res.ArtifactsError)
	}
	out.text(m.Stderr, msg.String())
	return nil
}

// artifactsCommand is "submit artifacts ID [-O DIR]".
type artifactsCommand struct {
	m   *Main
	out output
	dir string
}

func (c *artifactsCommand) synopsis() string { return "artifacts ID [-O DIR] [--json]" }

func (c *artifactsCommand) about() string {
	return `Lists the files job ID returned (its outputs): name, size, sha256, and
what was skipped and why. With -O DIR, writes them into DIR under their
names, checking each one's digest. Artifacts live as long as results (24h).
Exits 1 for an unknown job, 75 while it is queued or running.
`
}

func (c *artifactsCommand) define(fs *pflag.FlagSet) {
	fs.StringVarP(&c.dir, "out-dir", "O", "", "write the artifacts into `DIR`")
	c.out = output{m: c.m}
	c.out.define(fs, `print {"artifacts": [...], "artifacts_skipped": [...]} as JSON on stdout`, false)
}

func (c *artifactsCommand) run(ctx context.Context, fs *pflag.FlagSet) error {
	if fs.NArg() != 1 {
		return usageError("artifacts", "artifacts takes one job ID, got %q", fs.Args())
	}
	id := fs.Arg(0)
	client, closeConn, err := c.m.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	res, err := client.Get(ctx, id)
	if errors.Is(err, jobs.ErrNotFound) {
		queued, qerr := client.Pending(ctx, id)
		switch {
		case errors.Is(qerr, jobs.ErrNotTenants):
			return fail(exitPending, "job %s has no result yet: queued or running, or no such job (a tenant cannot read the queue; results and artifacts are kept 24h)", id)
		case qerr == nil && queued:
			return fail(exitPending, "job %s is queued or running; no artifacts yet (submit wait %s)", id, id)
		}
		return fail(exitNotFound, "no job %s (results and artifacts are kept 24h)", id)
	}
	if err != nil {
		return fail(exitUnavailable, "%w", err)
	}
	if c.out.json {
		c.out.printJSON(struct {
			Artifacts        []jobs.Artifact        `json:"artifacts"`
			ArtifactsSkipped []jobs.SkippedArtifact `json:"artifacts_skipped,omitempty"`
			ArtifactsError   string                 `json:"artifacts_error,omitempty"`
		}{res.Artifacts, res.ArtifactsSkipped, res.ArtifactsError})
	} else {
		var b strings.Builder
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tSIZE\tSHA256")
		for _, a := range res.Artifacts {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", a.Name, a.Size, a.SHA256)
		}
		tw.Flush()
		for _, s := range res.ArtifactsSkipped {
			fmt.Fprintf(&b, "skipped %s (%d bytes): %s\n", s.Name, s.Size, s.Reason)
		}
		if res.ArtifactsError != "" {
			fmt.Fprintln(&b, res.ArtifactsError)
		}
		c.out.text(c.m.Stdout, b.String())
	}
	if c.dir != "" {
		return downloadArtifacts(ctx, c.m, client, res, c.dir)
	}
	return nil
}

// workspaceCommand is "submit workspace ls|show|rm|get".
type workspaceCommand struct {
	m   *Main
	out output
	dir string
}

func (c *workspaceCommand) synopsis() string {
	return "workspace ls | show NAME | rm NAME | get NAME[@REV] -o DIR [--json]"
}

func (c *workspaceCommand) about() string {
	return `Workspaces are an agent's files across jobs (submit run --workspace NAME),
kept by the fleet in JetStream and removed after a day without a step.

  ls               every workspace (a tenant's: its own, named <tenant>.<name>):
                   its revision, size, files, last job
  show NAME        one workspace: its head, the revisions kept, a step in flight
  rm NAME          remove it (a step in flight then saves nothing)
  get NAME[@REV] -o DIR
                   write the files of its head (or of revision REV) into DIR,
                   which must be empty; a snapshot holding what a sandbox never
                   writes (links leading out, devices, setuid bits), or whose
                   bytes fail their digest, is refused, and DIR left as it was

Exits 1 for an unknown workspace or revision, or a refused snapshot.
`
}

func (c *workspaceCommand) define(fs *pflag.FlagSet) {
	fs.StringVarP(&c.dir, "out", "o", "", "get: write the files into `DIR`")
	c.out = output{m: c.m}
	c.out.define(fs, "ls, show: print the heads as JSON on stdout", false)
}

func (c *workspaceCommand) run(ctx context.Context, fs *pflag.FlagSet) error {
	args := fs.Args()
	if len(args) == 0 {
		return usageError("workspace", "workspace takes ls, show NAME, rm NAME or get NAME -o DIR")
	}
	verb, args := args[0], args[1:]
	want := map[string]int{"ls": 0, "show": 1, "rm": 1, "get": 1}
	n, ok := want[verb]
	switch {
	case !ok:
		return usageError("workspace", "unknown workspace command %q (ls, show, rm, get)", verb)
	case len(args) != n:
		return usageError("workspace", "workspace %s takes %d argument(s), got %q", verb, n, args)
	case verb == "get" && c.dir == "":
		return usageError("workspace", "workspace get needs -o DIR")
	case verb != "get" && c.dir != "":
		return usageError("workspace", "-o DIR goes with workspace get")
	}
	if verb == "get" {
		if des, err := os.ReadDir(c.dir); err == nil && len(des) > 0 {
			return usageError("workspace", "-o %s is not empty", c.dir)
		}
	}
	client, closeConn, err := c.m.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	switch verb {
	case "ls":
		return c.ls(ctx, client)
	case "show":
		return c.show(ctx, client, args[0])
	case "rm":
		return c.rm(ctx, client, args[0])
	}
	return c.get(ctx, client, args[0])
}

// notFound maps the client's errors to exit codes.
func notFound(err error) error {
	switch {
	case errors.Is(err, jobs.ErrNoWorkspace), errors.Is(err, jobs.ErrNoRevision), errors.Is(err, jobs.ErrNoWorkspaces),
		errors.Is(err, archive.ErrRefused), errors.Is(err, jobs.ErrDigest):
		return fail(exitNotFound, "%w", err)
	case errors.Is(err, jobs.ErrInvalidJob):
		return fail(exitUsage, "%w", err)
	}
	return fail(exitUnavailable, "%w", err)
}

func (c *workspaceCommand) ls(ctx context.Context, client *jobs.Client) error {
	heads, err := client.Workspaces(ctx)
	if err != nil {
		return notFound(err)
	}
	if c.out.json {
		if heads == nil {
			heads = []*jobs.WorkspaceHead{}
		}
		c.out.printJSON(heads)
		return nil
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tREVISION\tSIZE\tFILES\tJOB\tUPDATED\tSTEP")
	now := time.Now()
	for _, h := range heads {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s ago\t%s\n", h.Name, h.Revision, h.SizeBytes, h.Files, orDash(h.Job), ago(now, h.UpdatedAt), stepText(h.Step))
	}
	if len(heads) == 0 {
		fmt.Fprintln(tw, "(no workspaces)")
	}
	tw.Flush()
	c.out.text(c.m.Stdout, b.String())
	return nil
}

func (c *workspaceCommand) show(ctx context.Context, client *jobs.Client, name string) error {
	h, err := client.Workspace(ctx, name)
	if err != nil {
		return notFound(err)
	}
	if c.out.json {
		c.out.printJSON(h)
		return nil
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "workspace\t%s\n", h.Name)
	fmt.Fprintf(tw, "revision\t%d (job %s)\n", h.Revision, orDash(h.Job))
	fmt.Fprintf(tw, "snapshot\t%d bytes, %d files, sha256 %s\n", h.SizeBytes, h.Files, orDash(h.SHA256))
	fmt.Fprintf(tw, "kept\t%s\n", orDash(strings.Trim(fmt.Sprint(h.Kept), "[]")))
	if h.Forked != nil {
		fmt.Fprintf(tw, "forked from\t%s\n", h.Forked)
	}
	fmt.Fprintf(tw, "updated\t%s (%s ago)\n", h.UpdatedAt.Format(time.RFC3339), ago(time.Now(), h.UpdatedAt))
	fmt.Fprintf(tw, "step\t%s\n", stepText(h.Step))
	tw.Flush()
	c.out.text(c.m.Stdout, b.String())
	return nil
}

func (c *workspaceCommand) rm(ctx context.Context, client *jobs.Client, name string) error {
	left, err := client.DeleteWorkspace(ctx, name)
	if err != nil {
		return notFound(err)
	}
	fmt.Fprintf(c.m.Stdout, "removed workspace %s\n", name)
	if left > 0 {
		c.m.warnf("%d snapshots of %s could not be deleted by this user; they expire with the workspaces' TTL", left, name)
	}
	return nil
}

func (c *workspaceCommand) get(ctx context.Context, client *jobs.Client, arg string) error {
	ref, err := jobs.ParseWorkspaceRef(arg)
	if err != nil {
		return fail(exitUsage, "%w", err)
	}
	name, err := client.QualifyWorkspace(ref.Name)
	if err != nil {
		return fail(exitUsage, "%w", err)
	}
	rev, files, err := client.ExtractWorkspace(ctx, ref, c.dir)
	if err != nil {
		return notFound(err)
	}
	fmt.Fprintf(c.m.Stdout, "wrote %s@%d (%d entries) to %s\n", name, rev, files, c.dir)
	return nil
}

func stepText(s *jobs.InFlight) string {
	if s == nil {
		return "-"
	}
	return fmt.Sprintf("%s: job %s on %s since %s, from %s", s.State, s.Job, s.Worker, s.Since.Format(time.RFC3339), s.Base)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
