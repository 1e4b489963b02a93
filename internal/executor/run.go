package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/field"
	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// Run runs job in a fresh sandbox and returns its result. Every outcome of
// the job itself, including rejection and cancellation through ctx, is a
// Result with a final status; the error is non-nil only when the engine
// failed, and then wraps ErrInfrastructure and the result is nil. The
// container is removed on every path.
//
// Run fills ID, Labels, Status, Exit, Stdout, Stderr, the *_truncated flags,
// DurationMS, CPUMS, PeakMemoryBytes, StartedAt, FinishedAt and Error.
// Exit is nil when the job did not end on its own (timeout, output_limit,
// canceled). CPUMS and PeakMemoryBytes come from the sandbox's cgroup, or
// failing that from wait4, and are nil when the job was killed before it
// could report them.
func (e *Executor) Run(ctx context.Context, job *jobs.Job, opts jobrun.Options) (*jobs.Result, error) {
	res := &jobs.Result{ID: job.ID, Labels: job.Labels, RetryOf: job.RetryOf}
	log := e.cfg.Logger.With("job_id", job.ID, "worker", e.cfg.WorkerID)
	done := func(st jobs.Status, msg string) *jobs.Result {
		now := time.Now().UTC()
		res.Status, res.Error, res.FinishedAt = st, msg, &now
		log.Info("job finished", "status", st, "error", msg)
		return res
	}

	a, msg := e.accept(ctx, job, opts)
	if msg != "" {
		return done(jobs.StatusRejected, msg), nil
	}
	if ctx.Err() != nil {
		return done(jobs.StatusCanceled, "canceled before it started"), nil
	}
	res.Template = a.ref
	s, err := e.sandboxFor(ctx, log, a.admitted, job.ID)
	if err != nil {
		if ctx.Err() != nil {
			// The caller's cancellation is the job's outcome, not the engine's fault.
			return done(jobs.StatusCanceled, "canceled before it started"), nil
		}
		log.Warn("sandbox failed", "error", err)
		return nil, err
	}
	r, err := e.runIn(ctx, log, s, a, opts, res)
	if errors.Is(err, errNotReady) {
		return done(jobs.StatusError, fmt.Sprintf("template %s: %v", a.tmpl.Name, err)), nil
	}
	if err != nil {
		log.Warn("sandbox failed", "error", err)
		return nil, err
	}
	r.fill(res)
	res.ImageDigest = s.imageID
	log.Info("job finished", "status", res.Status, "exit_code", derefInt(res.Exit),
		"duration_ms", *res.DurationMS, "container", r.container)
	return res, nil
}

// accepted is a job the executor takes: what it was admitted on, the
// job with its template's env under its own, and its envelope.
type accepted struct {
	admitted
	job    *jobs.Job
	sealed sealed
}

// accept checks a job against this executor (admission) and builds its
// envelope. msg says why the job is rejected, "" when it is not.
func (e *Executor) accept(ctx context.Context, job *jobs.Job, opts jobrun.Options) (a accepted, msg string) {
	// The job's tenant is its ID's, which the worker took from the
	// subject the job came on: a tenant may publish on its own alone.
	ad, err := e.admission(ctx, jobs.TenantOf(job.ID), job.Image, job.Limits, job.Env)
	if err != nil {
		return a, err.Error()
	}
	if ad.tmpl != nil && len(ad.tmpl.Env) > 0 {
		j := *job
		j.Env = ad.env
		job = &j
	}
	env, err := buildEnvelope(job, ad.preset, ad.lim, opts, nil)
	if err != nil {
		return a, err.Error()
	}
	return accepted{admitted: ad, job: job, sealed: env}, ""
}

// runIn runs the job in s and ends s however that ends: a panic (the
// caller's OnStart, a bug), which the worker recovers, would leave the
// sandbox running with no timer to stop it. What a sandbox with a
// network used is recorded in res.
func (e *Executor) runIn(ctx context.Context, log *slog.Logger, s *sandbox, a accepted, opts jobrun.Options, res *jobs.Result) (*outcome, error) {
	defer func() { res.Egress = e.leave(ctx, log, s) }()
	env := a.sealed
	if s.net != nil {
		// The envelope now holds the environment of this sandbox's proxy
		// (it was checked before the sandbox was made, without it).
		var err error
		if env, err = buildEnvelope(a.job, a.preset, a.lim, opts, s.net.Env); err != nil {
			return nil, infraErr("egress envelope", err)
		}
	}
	if a.tmpl != nil {
		if err := e.prepare(ctx, s, a.tmpl, a.lim); err != nil {
			return nil, err
		}
	}
	return e.execute(ctx, log, s, a.lim, env, []byte(a.job.Stdin), opts)
}

// fill records the outcome in res.
func (r *outcome) fill(res *jobs.Result) {
	res.Status, res.Error = r.status, r.msg
	res.Exit = r.exit
	res.SetOutput(r.stdout, r.stderr)
	res.StdoutTruncated, res.StderrTruncated = r.stdoutTrunc, r.stderrTrunc
	started, finished := r.started.UTC(), r.finished.UTC()
	ms := finished.Sub(started).Milliseconds()
	res.StartedAt, res.FinishedAt, res.DurationMS = &started, &finished, &ms
	res.CPUMS, res.PeakMemoryBytes = r.cpuMS, r.peakBytes
	res.Compile, res.Tests = r.compile, r.tests
	res.Display, res.DisplayDropped = r.display, r.displayDropped
}

// sealed is the envelope of one job: the header bytes and the seal of the
// launcher's trailer.
type sealed struct {
	header []byte
	seal   envelope.Seal
	judge  *judgeSpec // nil for a job with neither a compile step nor tests
}

// buildEnvelope seals job for preset p; base is the environment under the
// job's own (the egress proxy's, for a job with a network).
func buildEnvelope(job *jobs.Job, p Preset, lim limits.Limits, opts jobrun.Options, base map[string]string) (sealed, error) {
	argv := p.Argv
	if len(job.Argv) > 0 {
		argv = job.Argv
	}
	_, mainInFiles := job.Files[p.MainFile]
	if mainInFiles && job.Code != "" {
		return sealed{}, fmt.Errorf("files[%q]: collides with the preset's main file, which holds code", p.MainFile)
	}
	restore, arch, err := workspaceHeader(opts, lim)
	if err != nil {
		return sealed{}, err
	}
	seal := envelope.NewSeal()
	h := &envelope.Header{Argv: argv, Env: jobEnv(base, job.Env), Dir: workDir, Key: seal.Key, Restore: restore, Archive: arch}
	spec, err := judgeHeader(h, job, p, lim)
	if err != nil {
		return sealed{}, err
	}
	if !mainInFiles {
		h.Files = append(h.Files, envelope.File{Name: p.MainFile, Data: []byte(job.Code)})
	}
	h.Files = append(h.Files, filesByName(job.Files)...)
	b, err := envelope.Marshal(h)
	if err != nil {
		// Marshal validates: what fails here is the job's input, and a
		// field's error names the field as the user wrote it.
		if fe := (*field.Error)(nil); errors.As(err, &fe) {
			return sealed{}, fe
		}
		return sealed{}, err
	}
	return sealed{header: b, seal: seal, judge: spec}, nil
}

// DeterministicEnv is the environment every job starts from, so that two
// runs of one job see the same clock zone, locale, hash order and build
// timestamps; a job's env overrides any of it.
var DeterministicEnv = map[string]string{
	"TZ":                "UTC",
	"LANG":              "C.UTF-8",
	"LC_ALL":            "C.UTF-8",
	"PYTHONHASHSEED":    "0",
	"SOURCE_DATE_EPOCH": "0",
}

// Hostname is every sandbox's host name.
const Hostname = "sandbox"

// jobEnv is DeterministicEnv under base under the job's own env.
func jobEnv(base, env map[string]string) map[string]string {
	out := make(map[string]string, len(DeterministicEnv)+len(base)+len(env))
	for _, m := range []map[string]string{DeterministicEnv, base, env} {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// judgeHeader adds a job's compile step (its own, else its preset's) and
// test cases to h, each case's timeout resolved against the job's.
func judgeHeader(h *envelope.Header, job *jobs.Job, p Preset, lim limits.Limits) (*judgeSpec, error) {
	h.Compile = p.Compile
	if len(job.Compile) > 0 {
		h.Compile = job.Compile
	}
	if len(h.Compile) == 0 && len(job.Tests) == 0 {
		return nil, nil
	}
	spec := &judgeSpec{compiled: len(h.Compile) > 0, tests: len(job.Tests) > 0}
	h.CompileOutputLimit = int64(lim.Output)
	if !spec.tests {
		return spec, nil
	}
	h.Tests = &envelope.Tests{StopOnFirstFailure: job.StopOnFirstFailure, OutputLimit: int64(lim.Output)}
	spec.names = make([]string, len(job.Tests))
	for i, c := range job.Tests {
		to := c.Timeout
		switch {
		case to == 0:
			to = lim.Timeout
		case to > lim.Timeout:
			return nil, &field.Error{Field: fmt.Sprintf("tests[%d].timeout", i),
				Reason: fmt.Sprintf("%s is over the job's timeout of %s", c.Timeout, lim.Timeout)}
		}
		h.Tests.Cases = append(h.Tests.Cases, envelope.Case{
			Stdin: []byte(c.Stdin), Args: c.Args, Expected: []byte(c.ExpectedStdout),
			TimeoutMS: max(1, to.D().Milliseconds()), Compare: c.Compare, Tolerance: c.Tolerance,
		})
		spec.names[i] = c.Name
	}
	return spec, nil
}

func derefInt(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

// filesByName is a job's or a session's files as the envelope carries
// them, in the order of their names (the launcher writes them so).
func filesByName(files map[string]string) []envelope.File {
	out := make([]envelope.File, 0, len(files))
	for _, n := range slices.Sorted(maps.Keys(files)) {
		out = append(out, envelope.File{Name: n, Data: []byte(files[n])})
	}
	return out
}
