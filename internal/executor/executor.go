package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// Executor runs jobs in sandbox containers. It is safe for concurrent use;
// bounding the concurrency is the caller's business.
type Executor struct {
	cfg       Config
	api       dockerAPI
	ownClient *client.Client  // created by New, closed by Close
	optional  map[string]bool // images only optional presets use
	imgs      images          // image references resolved to IDs
	instance  string          // LabelInstance of this Executor's containers
	images    []string        // the presets' distinct images, in the order of their names
	pool      *pool           // nil when Config.Pool is 0
	starts    *startGate      // whether sandboxes start: every launch asks it
	uids      *uidClaims      // the uids this Executor's sandboxes hold
	users     *userFiles      // the sandboxes' /etc/passwd and /etc/group
	templates templateSet     // the fleet's templates, as the worker last heard of them

	// Containers whose removal failed (sandboxes, and leftovers Reap
	// found), retried in the background until they are gone.
	stuck *stuckSet

	// Removals of exited sandboxes run after Run returned, off the job's
	// latency: at most cap(removeSlots) at once (past that, release
	// removes inline, which bounds them), all waited for by Close.
	removing    sync.WaitGroup
	removeSlots chan struct{}
	closing     chan struct{} // closed by Close: background sweeps stop
	closeOnce   sync.Once
	createWait  time.Duration // the create's deadline
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
	stuck  stuckTuning // zero: defaultStuckTuning
}

var defaultTuning = tuning{calls: deadlines, starts: defaultStartTuning, stuck: defaultStuckTuning}

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
		uids:        newUIDClaims(cfg.UIDs),
		stuck:       newStuckSet(t.stuck),
		removeSlots: make(chan struct{}, maxBackgroundRemovals),
		closing:     make(chan struct{}),
		createWait:  t.calls.create,
	}
	e.users = newUserFiles(cfg.WorkerID, e.instance)
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
	e.closeOnce.Do(func() { close(e.closing) })
	e.closeTemplatePools()
	e.removing.Wait()
	e.closeStuck()
	e.users.release()
	os.RemoveAll(e.users.dir) // a sandbox still running keeps the files it mounted
	if e.ownClient != nil {
		err = errors.Join(err, e.ownClient.Close())
	}
	return err
}

// StorageDriver names the engine's storage driver, as docker info does
// ("overlay2", "fuse-overlayfs", ...).
func (e *Executor) StorageDriver(ctx context.Context) (string, error) {
	info, err := e.api.Info(ctx, client.InfoOptions{})
	if err != nil {
		return "", infraErr("engine info", err)
	}
	return info.Info.Driver, nil
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
// is logged and skipped, by this call and every later one, and handed to
// the background retries (see Unremovable). It also removes the user
// tables (users.go) the worker's earlier executors left.
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
		if e.isStuck(c.ID) {
			continue // the background retries have it
		}
		if _, err := e.api.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			if ctx.Err() != nil {
				return n, infraErr("reap", ctx.Err())
			}
			e.cfg.Logger.Error("a leftover sandbox cannot be removed; skipping it here, retrying it in the background",
				"container", shortID(c.ID), "job_id", c.Labels[LabelJob], "worker", e.cfg.WorkerID, "error", err)
			e.stick(c.ID, 0, false, nil, err)
			continue
		}
		n++
		e.cfg.Logger.Info("reaped a leftover sandbox", "container", shortID(c.ID),
			"job_id", c.Labels[LabelJob], "pooled", c.Labels[LabelPool] == "true", "worker", e.cfg.WorkerID)
	}
	e.users.removeOthers()
	return n, nil
}
