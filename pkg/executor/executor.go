package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/field"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// streamGrace is how long the output may keep flowing after the container
// exited (the engine flushes the attach stream a little after the wait
// returns); past it the stream is cut.
const streamGrace = 2 * time.Second

// Executor runs jobs in sandbox containers. It is safe for concurrent use;
// bounding the concurrency is the caller's business.
type Executor struct {
	cfg       Config
	api       dockerAPI
	ownClient *client.Client  // created by New, closed by Close
	instance  string          // LabelInstance of this Executor's containers
	images    []string        // the presets' distinct images, in the order of their names
	optional  map[string]bool // images only optional presets use
	imgs      images          // image references resolved to IDs
	pool      *pool           // nil when Config.Pool is 0
	starts    *startGate      // whether sandboxes start: every launch asks it

	// Leftovers Reap failed to remove, which it skips from then on: a
	// container wedged in the engine hangs every call that touches it.
	mu          sync.Mutex
	unremovable map[string]bool

	// Removals of exited sandboxes run after Run returned, off the job's
	// latency: at most cap(removeSlots) at once (past that, release
	// removes inline, which bounds them), all waited for by Close.
	removing    sync.WaitGroup
	removeSlots chan struct{}
}

// maxBackgroundRemovals bounds the removals in flight behind returned jobs.
const maxBackgroundRemovals = 16

// New returns an Executor for cfg. It does not wait for the engine: call
// Check to verify that the daemon answers, the images exist and sandboxes
// start, and Reap to clean up after a crashed predecessor with the same
// WorkerID. With Config.Pool > 0 it starts filling the warm pool in the
// background (backing off while the engine fails); Close stops it and
// removes the pool. Every call to the engine has a deadline (see
// callDeadlines).
func New(cfg Config) (*Executor, error) {
	if cfg.Client != nil {
		return newWithAPI(cfg, cfg.Client)
	}
	cli, err := client.New(client.FromEnv) // negotiates the API version by default
	if err != nil {
		return nil, infraErr("docker client", err)
	}
	e, err := newWithAPI(cfg, cli)
	if err != nil {
		cli.Close()
		return nil, err
	}
	e.ownClient = cli
	return e, nil
}

// tuning is the executor's fixed timing: the engine's deadlines and the
// back-off of failing starts. Tests shrink it.
type tuning struct {
	calls  callDeadlines
	starts startTuning
}

var defaultTuning = tuning{calls: deadlines, starts: defaultStartTuning}

// newWithAPI is New on any engine, a fake one in tests.
func newWithAPI(cfg Config, api dockerAPI) (*Executor, error) {
	return newTuned(cfg, api, defaultTuning)
}

func newTuned(cfg Config, api dockerAPI, t tuning) (*Executor, error) {
	cfg, err := cfg.resolved()
	if err != nil {
		return nil, err
	}
	e := &Executor{
		cfg:         cfg,
		api:         withDeadlines{api: api, d: t.calls, log: cfg.Logger},
		instance:    randHex(8),
		starts:      newStartGate(cfg.Runtime, cfg.Logger.With("worker", cfg.WorkerID), t.starts),
		unremovable: map[string]bool{},
		removeSlots: make(chan struct{}, maxBackgroundRemovals),
	}
	seen := map[string]bool{}
	e.optional = map[string]bool{}
	for _, name := range e.Presets() {
		p := cfg.Presets[name]
		if !seen[p.Image] {
			seen[p.Image] = true
			e.images = append(e.images, p.Image)
			e.optional[p.Image] = true
		}
		if !p.Optional {
			e.optional[p.Image] = false
		}
	}
	if cfg.Pool > 0 {
		e.pool = newPool(e)
	}
	return e, nil
}

// Close stops refilling the warm pool, removes its containers, waits for
// the removals of finished jobs' containers, and releases the Docker client
// if New created it. Call it after the last Run returned.
func (e *Executor) Close() error {
	var err error
	if e.pool != nil {
		err = e.pool.close()
	}
	e.removing.Wait()
	if e.ownClient != nil {
		err = errors.Join(err, e.ownClient.Close())
	}
	return err
}

// Presets returns the names of the presets a job may use, sorted.
func (e *Executor) Presets() []string {
	names := make([]string, 0, len(e.cfg.Presets))
	for n := range e.cfg.Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Check verifies that the engine answers, every preset's image is present
// and sandboxes start with the configured runtime. Its errors wrap
// ErrInfrastructure (ErrImageMissing for images, ErrSandboxStart, as a
// *StartError, for starts).
//
// Whether sandboxes start is known from the last launch. Before the first
// one, and while they fail, Check launches a throwaway sandbox when the
// back-off allows (or waits for the launch in flight) and removes it: a
// worker that calls it before taking jobs knows that its runtime works.
// Between attempts it returns the last StartError without touching the
// engine beyond the ping: a successful ping says nothing about starts.
func (e *Executor) Check(ctx context.Context) (err error) {
	if err := e.ping(ctx); err != nil {
		return err
	}
	defer func() {
		if err == nil && e.pool != nil {
			// The engine is back: refill now rather than at the end of a
			// back-off.
			e.pool.retryNow()
		}
	}()
	seen := map[string]bool{}
	for _, name := range e.Presets() {
		img := e.cfg.Presets[name].Image
		if seen[img] {
			continue
		}
		seen[img] = true
		if _, err := e.resolveImage(ctx, img, true); err != nil {
			if errors.Is(err, ErrImageMissing) {
				if e.optional[img] {
					continue // its presets' jobs are rejected, naming it
				}
				return fmt.Errorf("%w: %s (preset %q; %s)", ErrImageMissing, img, name, e.buildHint(img))
			}
			return err
		}
	}
	for len(e.images) > 0 { // no preset, no sandbox to start
		turn, ended, err := e.starts.turn(true)
		switch turn {
		case turnGo:
			return nil
		case turnDenied:
			return err
		case turnBusy:
			select {
			case <-ended:
				continue
			case <-ctx.Done():
				return infraErr("runtime check", ctx.Err())
			}
		}
		s, err := e.startSandbox(ctx, true, e.trialImage(), "", e.cfg.Defaults)
		if err != nil {
			return err
		}
		e.cfg.Logger.Debug("runtime check: a sandbox started", "runtime", e.cfg.Runtime, "container", s.short, "worker", e.cfg.WorkerID)
		e.release(ctx, e.cfg.Logger, s)
	}
	return nil
}

// trialImage is the image Check starts a sandbox of: the first that is
// present, as Check just saw.
func (e *Executor) trialImage() string {
	for _, img := range e.images {
		if !e.optional[img] || e.known(img) {
			return img
		}
	}
	return e.images[0]
}

func (e *Executor) ping(ctx context.Context) error {
	if _, err := e.api.Ping(ctx, client.PingOptions{}); err != nil {
		return infraErr("docker ping", err)
	}
	return nil
}

// StartErr returns the *StartError while sandboxes fail to start, else
// nil.
func (e *Executor) StartErr() error { return e.starts.err() }

// Reap force-removes every container labelled with this worker's ID but not
// made by this Executor: what a crashed predecessor left behind, running
// sandboxes and warm pool alike. This Executor's own containers carry its
// LabelInstance and are spared, so Reap is safe to call at any time,
// though once at start is enough. It returns how many it removed, and an
// error only when it could not list them. A container it cannot remove
// (the engine keeps it wedged: every call on it hangs until its deadline)
// is logged and skipped, by this call and every later one.
func (e *Executor) Reap(ctx context.Context) (int, error) {
	list, err := e.api.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", LabelWorker+"="+e.cfg.WorkerID),
	})
	if err != nil {
		return 0, infraErr("list containers", err)
	}
	n := 0
	for _, c := range list.Items {
		if c.Labels[LabelManaged] != "true" || c.Labels[LabelWorker] != e.cfg.WorkerID || c.Labels[LabelInstance] == e.instance {
			continue
		}
		e.mu.Lock()
		skip := e.unremovable[c.ID]
		e.mu.Unlock()
		if skip {
			continue
		}
		if _, err := e.api.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			if ctx.Err() != nil {
				return n, infraErr("reap", ctx.Err())
			}
			e.mu.Lock()
			e.unremovable[c.ID] = true
			e.mu.Unlock()
			e.cfg.Logger.Error("a leftover sandbox cannot be removed; skipping it (remove it by hand, or restart the engine)",
				"container", shortID(c.ID), "job_id", c.Labels[LabelJob], "worker", e.cfg.WorkerID, "error", err)
			continue
		}
		n++
		e.cfg.Logger.Info("reaped a leftover sandbox", "container", shortID(c.ID),
			"job_id", c.Labels[LabelJob], "pooled", c.Labels[LabelPool] == "true", "worker", e.cfg.WorkerID)
	}
	return n, nil
}

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
func (e *Executor) Run(ctx context.Context, job *jobs.Job, opts jobs.RunOptions) (*jobs.Result, error) {
	res := &jobs.Result{ID: job.ID, Labels: job.Labels, RetryOf: job.RetryOf}
	log := e.cfg.Logger.With("job_id", job.ID, "worker", e.cfg.WorkerID)
	done := func(st jobs.Status, msg string) *jobs.Result {
		now := time.Now().UTC()
		res.Status, res.Error, res.FinishedAt = st, msg, &now
		log.Info("job finished", "status", st, "error", msg)
		return res
	}

	preset, ok := e.cfg.Presets[job.Image]
	if !ok {
		return done(jobs.StatusRejected, fmt.Sprintf("image: unknown preset %q (this worker allows %s)",
			job.Image, strings.Join(e.Presets(), ", "))), nil
	}
	if preset.Optional {
		if _, err := e.resolveImage(ctx, preset.Image, false); errors.Is(err, ErrImageMissing) {
			return done(jobs.StatusRejected, fmt.Sprintf("image: preset %q needs the image %s, which this worker does not have (%s)",
				job.Image, preset.Image, e.buildHint(preset.Image))), nil
		}
	}
	lim, err := limits.Resolve(job.Limits, e.cfg.Defaults, e.cfg.Caps)
	if err != nil {
		return done(jobs.StatusRejected, err.Error()), nil
	}
	env, err := buildEnvelope(job, preset, lim, opts)
	if err != nil {
		return done(jobs.StatusRejected, err.Error()), nil
	}
	if ctx.Err() != nil {
		return done(jobs.StatusCanceled, "canceled before it started"), nil
	}

	var s *sandbox
	if e.pool != nil && e.pool.fits(lim) {
		s = e.pool.take(preset.Image)
	}
	if s != nil {
		log.Debug("job handed to a warm sandbox", "container", s.short, "age", time.Since(s.born).Round(time.Millisecond))
	} else {
		s, err = e.admit(ctx, preset.Image, job.ID, lim)
		if err != nil {
			if ctx.Err() != nil {
				// The caller's cancellation is the job's outcome, not the engine's fault.
				return done(jobs.StatusCanceled, "canceled before it started"), nil
			}
			log.Warn("sandbox failed", "error", err)
			return nil, err
		}
	}
	r, err := e.execute(ctx, log, s, lim, env, []byte(job.Stdin), opts)
	e.release(ctx, log, s)
	if err != nil {
		log.Warn("sandbox failed", "error", err)
		return nil, err
	}
	res.Status, res.Error = r.status, r.msg
	res.Exit = r.exit
	res.SetOutput(r.stdout, r.stderr)
	res.StdoutTruncated, res.StderrTruncated = r.stdoutTrunc, r.stderrTrunc
	started, finished := r.started.UTC(), r.finished.UTC()
	ms := finished.Sub(started).Milliseconds()
	res.StartedAt, res.FinishedAt, res.DurationMS = &started, &finished, &ms
	res.CPUMS, res.PeakMemoryBytes = r.cpuMS, r.peakBytes
	res.Compile, res.Tests = r.compile, r.tests
	res.ImageDigest = s.imageID
	log.Info("job finished", "status", res.Status, "exit_code", derefInt(res.Exit),
		"duration_ms", ms, "container", r.container)
	return res, nil
}

// sealed is the envelope of one job: the header bytes and the seal of the
// launcher's trailer.
type sealed struct {
	header []byte
	seal   envelope.Seal
	judge  *judgeSpec // nil for a job with neither a compile step nor tests
}

func buildEnvelope(job *jobs.Job, p Preset, lim limits.Limits, opts jobs.RunOptions) (sealed, error) {
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
	h := &envelope.Header{Argv: argv, Env: jobEnv(job.Env), Dir: workDir, Key: seal.Key, Restore: restore, Archive: arch}
	spec, err := judgeHeader(h, job, p, lim)
	if err != nil {
		return sealed{}, err
	}
	if !mainInFiles {
		h.Files = append(h.Files, envelope.File{Name: p.MainFile, Data: []byte(job.Code)})
	}
	names := make([]string, 0, len(job.Files))
	for n := range job.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		h.Files = append(h.Files, envelope.File{Name: n, Data: []byte(job.Files[n])})
	}
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

// jobEnv is DeterministicEnv under the job's own env.
func jobEnv(env map[string]string) map[string]string {
	out := make(map[string]string, len(DeterministicEnv)+len(env))
	for k, v := range DeterministicEnv {
		out[k] = v
	}
	for k, v := range env {
		out[k] = v
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

// sandbox is a container that is created, attached (its stdin stream
// exists), watched (ContainerWait registered) and started, with its output
// already being demultiplexed into capped buffers: all a job needs but its
// envelope. A fresh one is launched for a job; a pooled one was launched
// ahead of time. Either serves exactly one job and is then released.
type sandbox struct {
	id, short string
	att       client.HijackedResponse
	wait      client.ContainerWaitResult
	stopWait  context.CancelFunc
	overflow  chan struct{}
	out       *capture
	copyDone  chan struct{} // closed when the output stream ended
	born      time.Time
	pool      *pool  // the pool it was taken from, if any
	imageID   string // the image it was created from; "" when the engine gave none
}

// alive reports whether the sandbox can still take a job: its attach
// stream has not ended (which it does when the container exits or the
// connection dies; the launcher writes nothing before its envelope).
func (s *sandbox) alive() bool {
	select {
	case <-s.copyDone:
		return false
	default:
		return true
	}
}

// admit launches a sandbox for a job when the gate lets it: at once while
// sandboxes start; after the launch in flight when none was tried yet; and
// while they fail only as the next attempt, once it is due. Otherwise it
// returns the StartError and makes no container: a held job retried in a
// loop must not become a container factory.
func (e *Executor) admit(ctx context.Context, image, jobID string, lim limits.Limits) (*sandbox, error) {
	for {
		turn, ended, err := e.starts.turn(true)
		switch turn {
		case turnDenied:
			return nil, err
		case turnBusy:
			if err != nil {
				return nil, err
			}
			select {
			case <-ended:
				continue
			case <-ctx.Done():
				return nil, infraErr("wait for the first sandbox to start", ctx.Err())
			}
		}
		return e.startSandbox(ctx, turn == turnTrial, image, jobID, lim)
	}
}

// startSandbox launches a sandbox and tells the gate how that went. A
// launch that failed while the engine answers its ping is a start failure,
// returned as a *StartError; one that failed because the engine does not
// answer, the image is missing or ctx is done says nothing about starts.
func (e *Executor) startSandbox(ctx context.Context, trial bool, image, jobID string, lim limits.Limits) (*sandbox, error) {
	s, err := e.launch(ctx, image, jobID, lim)
	switch {
	case err == nil:
		e.starts.started(trial)
		return s, nil
	case errors.Is(err, ErrImageMissing):
		e.starts.inconclusive(trial)
		return nil, err
	case ctx.Err() != nil:
		e.starts.inconclusive(trial)
		return nil, fmt.Errorf("%w: %w", ErrInfrastructure, err)
	}
	if perr := e.ping(ctx); perr != nil {
		e.starts.inconclusive(trial)
		return nil, fmt.Errorf("%w: %w", ErrInfrastructure, err)
	}
	return nil, e.starts.failed(trial, err)
}

// launch creates, attaches, watches and starts a sandbox for limits lim.
// jobID is "" for a pooled sandbox. On error, nothing is left behind (see
// discard), and the error, but for ErrImageMissing, is the engine's,
// prefixed with the step that failed.
func (e *Executor) launch(ctx context.Context, image, jobID string, lim limits.Limits) (_ *sandbox, err error) {
	// Not canceled with ctx: a create canceled in flight may still make a
	// container the engine never names to us, and nothing would remove it
	// before this worker restarts. A canceled job fails at the next step
	// instead, and the container is removed below.
	id, err := e.resolveImage(ctx, image, false)
	if err != nil {
		return nil, err
	}
	spec := e.containerSpec(image, jobID, lim)
	if id != "" {
		spec.Config.Image = id // exactly what the result will name
	}
	created, err := e.api.ContainerCreate(context.WithoutCancel(ctx), spec)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s (build it with sandbox-image/build.sh): %w", ErrImageMissing, image, err)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			// The engine may have made it after all: it goes by our name.
			e.discard(ctx, spec.Name)
		}
		return nil, fmt.Errorf("create container: %w", err)
	}
	s := &sandbox{id: created.ID, short: shortID(created.ID), born: time.Now(), imageID: id}
	defer func() {
		if err != nil {
			e.discard(ctx, s.id)
		}
	}()

	att, err := e.api.ContainerAttach(ctx, s.id, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	s.att = att.HijackedResponse
	// Registered before start, so that even an instant exit is seen. Its
	// context is the sandbox's, not the caller's: a pooled sandbox outlives
	// the call that launched it.
	var waitCtx context.Context
	waitCtx, s.stopWait = context.WithCancel(context.Background())
	s.wait = e.api.ContainerWait(waitCtx, s.id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})

	s.overflow = make(chan struct{}, 1)
	s.out = newCapture(int64(lim.Output), s.overflow)
	s.copyDone = make(chan struct{})
	go func() {
		defer close(s.copyDone)
		// Its error only says how the stream ended; the wait and the
		// inspection say how the container did.
		_, _ = stdcopy.StdCopy(s.out.stdoutWriter(), s.out.stderrWriter(), s.att.Reader)
	}()

	if _, err := e.api.ContainerStart(ctx, s.id, client.ContainerStartOptions{}); err != nil {
		s.att.Close()
		<-s.copyDone
		s.stopWait()
		return nil, fmt.Errorf("start container: %w", err)
	}
	return s, nil
}

// discard removes the container of a failed launch (by ID, or by name when
// the create's answer never came) and checks that it is gone: a runtime
// that fails every start leaves a created container per attempt, and
// processes of the engine's behind it, unless they are removed.
func (e *Executor) discard(ctx context.Context, idOrName string) {
	ctx = context.WithoutCancel(ctx)
	_, err := e.api.ContainerRemove(ctx, idOrName, client.ContainerRemoveOptions{Force: true})
	if err == nil || cerrdefs.IsNotFound(err) {
		if _, err = e.api.ContainerInspect(ctx, idOrName, client.ContainerInspectOptions{}); err == nil {
			err = errors.New("still there after it was removed")
		} else if cerrdefs.IsNotFound(err) {
			return
		}
	}
	e.cfg.Logger.Error("removing a sandbox that failed to start failed; Reap will retry at the next start",
		"container", shortID(idOrName), "worker", e.cfg.WorkerID, "error", err)
}

// release ends a sandbox's streams and goroutines and force-removes its
// container with a context of its own, whatever happened to its job. The
// removal runs in the background when a slot for it is free: the job's
// verdict is known and its container stopped or being killed, so the
// caller need not wait for the engine to unmount and delete it.
func (e *Executor) release(ctx context.Context, log *slog.Logger, s *sandbox) {
	s.att.Close()
	<-s.copyDone
	s.stopWait()
	removeLogged := func() {
		if err := e.remove(ctx, s); err != nil {
			log.Error("removing the sandbox failed; Reap will retry at the next start", "container", s.short, "error", err)
		}
	}
	select {
	case e.removeSlots <- struct{}{}:
		e.removing.Go(func() {
			defer func() { <-e.removeSlots }()
			removeLogged()
		})
	default:
		removeLogged()
	}
	if s.pool != nil {
		s.pool.done()
	}
}

// remove force-removes a sandbox's container, even for a caller that gave
// up: its deadline is the engine call's own.
func (e *Executor) remove(ctx context.Context, s *sandbox) error {
	if _, err := e.api.ContainerRemove(context.WithoutCancel(ctx), s.id, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return err
	}
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails on Linux
	return hex.EncodeToString(b)
}

func shortID(id string) string { return id[:min(12, len(id))] }

func firstNonNil(ps ...*int64) *int64 {
	if i := slices.IndexFunc(ps, func(p *int64) bool { return p != nil }); i >= 0 {
		return ps[i]
	}
	return nil
}

func nanosToMS(p *int64) *int64 {
	if p == nil {
		return nil
	}
	ms := *p / 1e6
	return &ms
}

func derefInt(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

var _ io.Writer = writerFunc(nil)
