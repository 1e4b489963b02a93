package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// Executor runs one job. It returns a Result for every outcome of the job
// itself, rejected included, and an error only when the infrastructure
// failed (the job is then retried, not charged). pkg/executor implements it.
type Executor interface {
	Run(ctx context.Context, job *jobs.Job, opts jobs.RunOptions) (*jobs.Result, error)
}

// Pinger is implemented by executors that can cheaply check their
// infrastructure (the Docker daemon). The worker fetches nothing until a
// first Ping succeeded, pings every WorkerTTL/3 while it serves, and after
// an infrastructure error (of Run or Ping) stops fetching until Ping
// succeeds again, pinging with back-off; without Pinger, it retries Run
// after a back-off. A Ping error that has a method RetryAfter()
// time.Duration sets the delay before the next ping instead: the executor
// knows when trying again can help (pkg/executor's StartError does).
type Pinger interface {
	Ping(ctx context.Context) error
}

// PoolReporter is implemented by executors with a warm pool (pkg/executor):
// the heartbeat reports it, for the fleet's status and the console.
type PoolReporter interface {
	WarmPool() *jobs.PoolStatus
}

// Causes of a job's context being canceled by the worker.
var (
	// ErrForced: the worker was forced to stop; the job is naked for
	// immediate redelivery and no result is stored.
	ErrForced = errors.New("worker forced to stop")
	// ErrCancelRequested: a client asked to cancel the job (jobs.Client.Cancel).
	ErrCancelRequested = errors.New(jobs.CancelReason)
)

// Config configures a Worker. The zero value of each field is its
// documented default.
type Config struct {
	// ID names the worker in results, logs and WORKERS. Default: the host
	// name. Characters not allowed in a KV key become '-'.
	ID string
	// Queue is the queue served: shorthand for Queues with one lane of
	// weight 1. Default jobs.DefaultQueue ("default"). After defaults it
	// names the first (heaviest) lane.
	Queue string
	// Queues are the lanes served, with their weights (see lanes.go for
	// the rule that shares slots among them). Default: one lane, Queue.
	// Set Queue or Queues, not both.
	Queues []Lane
	// Slots is how many jobs run at once; at least one per lane, since an
	// idle lane keeps a pull waiting with a slot of its own. Default
	// runtime.NumCPU(), or the number of lanes if that is more.
	Slots int
	// Version is reported in heartbeats. Default "dev".
	Version string
	// Topology of the stream, consumer and buckets; zero fields default.
	Topology jobs.Topology
	// FetchWait is how long a pull request waits at the server for a job
	// before the worker renews it; under 1s (nats.go's minimum) it counts
	// as 1s. A stop does not wait for it: pulls are withdrawn at once.
	// Default 2s.
	FetchWait time.Duration
	// HoldMax is how long a job is held (its lease kept alive) while the
	// executor's infrastructure is down, waiting to run it here, before it
	// is handed back with a delayed nak. Default 2m.
	HoldMax time.Duration
	// NakDelay is the redelivery delay after a failure that is not the
	// job's fault (result store unreachable, hold expired). Default 5s.
	NakDelay time.Duration
	// Backoff returns the back-off of infrastructure probes and of NATS
	// retries. Default: exponential from 250ms to 30s, never giving up.
	Backoff func() backoff.BackOff
	// SweepInterval is how often the worker looks for jobs given up after
	// MaxDeliver whose advisory nobody handled (see deadletter.go); it also
	// sweeps at start. Default 1m.
	SweepInterval time.Duration
	// Logger receives the worker's logs. Default slog.Default().
	Logger *slog.Logger
	// Observer is told of deliveries and outcomes, for metrics. Default:
	// none.
	Observer Observer
	// NoEvents turns off publishing each job's events (its output as it is
	// written, and its lifecycle) to the stream EVENTS, which `submit run`
	// prints live and `submit logs` replays (see events.go). Default: they
	// are published.
	NoEvents bool
	// NoIndex turns off writing the job index (stream INDEX, see
	// index.go), which the web console lists jobs from. Default: it is
	// written.
	NoIndex bool
	// KeepRevisions is how many revisions of a workspace keep their
	// snapshots (a fork may start from any of them). Default 10; at
	// least 2.
	KeepRevisions int
	// MaxArtifacts and MaxArtifactBytes bound the files one job returns;
	// past them files are skipped, and listed in the result. Defaults 100
	// and 64 MiB.
	MaxArtifacts     int
	MaxArtifactBytes int64
	// TempDir holds a job's snapshot and archive while it runs, as
	// unlinked files. Default os.TempDir().
	TempDir string
}

// ErrInvalidConfig is wrapped by Config.Validate's errors.
var ErrInvalidConfig = errors.New("invalid worker configuration")

var badKeyChars = regexp.MustCompile(`[^-/_=a-zA-Z0-9]`)

// NormalizeID returns the ID a worker configured with id goes by (see
// Config.ID). A process that also names the worker elsewhere, such as the
// executor's container labels, uses it so that every place shows one name.
func NormalizeID(id string) string {
	if id == "" {
		id, _ = os.Hostname()
		if id == "" {
			id = "worker"
		}
	}
	return badKeyChars.ReplaceAllString(id, "-")
}

func (c Config) withDefaults() Config {
	c.ID = NormalizeID(c.ID)
	c.Queues = lanesOf(c.Queue, c.Queues)
	c.Queue = c.Queues[0].Queue
	if c.Slots == 0 {
		c.Slots = max(runtime.NumCPU(), len(c.Queues))
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	c.Topology = c.Topology.WithDefaults()
	if c.FetchWait == 0 {
		c.FetchWait = 2 * time.Second
	}
	if c.HoldMax == 0 {
		c.HoldMax = 2 * time.Minute
	}
	if c.NakDelay == 0 {
		c.NakDelay = 5 * time.Second
	}
	if c.Backoff == nil {
		c.Backoff = func() backoff.BackOff {
			b := backoff.NewExponentialBackOff()
			b.InitialInterval = 250 * time.Millisecond
			b.MaxInterval = 30 * time.Second
			b.MaxElapsedTime = 0
			return b
		}
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	if c.KeepRevisions == 0 {
		c.KeepRevisions = 10
	}
	if c.MaxArtifacts == 0 {
		c.MaxArtifacts = 100
	}
	if c.MaxArtifactBytes == 0 {
		c.MaxArtifactBytes = 64 << 20
	}
	if c.TempDir == "" {
		c.TempDir = os.TempDir()
	}
	return c
}

// Validate checks the configuration after defaults and names the first bad
// field.
func (c Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
	}
	if c.Queue != "" && len(c.Queues) > 0 {
		return bad("Queue", "set Queue or Queues, not both")
	}
	if err := validLanes(c.Queues); err != nil {
		return bad("Queues", "%v", err)
	}
	c = c.withDefaults()
	switch {
	case !jobs.ValidQueue(c.Queue):
		return bad("Queue", "%q must match [A-Za-z0-9_-]{1,64}", c.Queue)
	case c.Slots < 1:
		return bad("Slots", "%d is under 1", c.Slots)
	case c.Slots < len(c.Queues):
		return bad("Slots", "%d is fewer than the %d lanes: an idle lane waits for work with a slot of its own", c.Slots, len(c.Queues))
	case c.FetchWait < 10*time.Millisecond:
		return bad("FetchWait", "%s is under 10ms", c.FetchWait)
	case c.HoldMax < 0:
		return bad("HoldMax", "%s is negative", c.HoldMax)
	case c.NakDelay < 0:
		return bad("NakDelay", "%s is negative", c.NakDelay)
	case c.SweepInterval < 10*time.Millisecond:
		return bad("SweepInterval", "%s is under 10ms", c.SweepInterval)
	case c.KeepRevisions < 2:
		return bad("KeepRevisions", "%d is under 2 (a step's base must be kept)", c.KeepRevisions)
	case c.MaxArtifacts < 0:
		return bad("MaxArtifacts", "%d is negative", c.MaxArtifacts)
	case c.MaxArtifactBytes < 0:
		return bad("MaxArtifactBytes", "%d is negative", c.MaxArtifactBytes)
	}
	if err := c.Topology.Validate(); err != nil {
		return fmt.Errorf("%w: Topology: %w", ErrInvalidConfig, err)
	}
	return nil
}

// Worker pulls jobs of one or more queues (lanes) and runs them on an
// Executor.
type Worker struct {
	cfg   Config
	js    jetstream.JetStream
	exec  Executor
	log   *slog.Logger
	obs   Observer
	start time.Time

	stores *jobs.Stores
	index  *indexer // nil with NoIndex
	lanes  []*lane  // heaviest first; set up by Run
	sched  sched    // shares slots among the lanes; the fetcher's alone

	busy     atomic.Int64
	held     atomic.Int64 // jobs held while the executor is down
	setUp    atomic.Bool  // the topology is ensured
	draining atomic.Bool
	health   *health
	beat     chan struct{} // the executor's health changed: beat now

	mu      sync.Mutex
	running map[*run]struct{}
}

// run is one job in progress, for cancel requests.
type run struct {
	id     string
	cancel context.CancelCauseFunc
}

// New returns a worker; Run starts it.
func New(js jetstream.JetStream, exec Executor, cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Worker{
		cfg:     cfg,
		js:      js,
		exec:    exec,
		log:     cfg.Logger.With("worker", cfg.ID, "queue", queueNames(cfg.Queues)),
		obs:     cfg.Observer,
		start:   time.Now().UTC(),
		health:  newHealth(),
		beat:    make(chan struct{}, 1),
		running: map[*run]struct{}{},
	}, nil
}

// ID returns the worker's ID as used in results and WORKERS.
func (w *Worker) ID() string { return w.cfg.ID }

// Ready reports whether the worker has set up its JetStream topology and
// believes the executor's infrastructure up.
func (w *Worker) Ready() bool { return w.setUp.Load() && w.health.ready() }

// Held returns how many jobs are held, their leases kept alive, waiting for
// the executor's infrastructure to come back.
func (w *Worker) Held() int { return int(w.held.Load()) }

// Status returns what the worker's heartbeat says.
func (w *Worker) Status() jobs.WorkerStatus {
	lastErr := w.health.lastError()
	var pool *jobs.PoolStatus
	if p, ok := w.exec.(PoolReporter); ok {
		pool = p.WarmPool()
	}
	return jobs.WorkerStatus{
		Pool:      pool,
		ID:        w.cfg.ID,
		Queue:     w.cfg.Queue,
		Queues:    laneNames(w.cfg.Queues),
		Version:   w.cfg.Version,
		Slots:     w.cfg.Slots,
		Busy:      int(w.busy.Load()),
		Ready:     w.health.ready(),
		Draining:  w.draining.Load(),
		LastError: lastErr,
		StartedAt: w.start,
		LastSeen:  time.Now().UTC(),
	}
}

// Run ensures the topology and serves jobs until stop is canceled, then
// drains: it withdraws its pull requests, lets the jobs in flight finish and
// returns nil. Canceling force (which implies stop) cancels the jobs in
// flight, which are naked for immediate redelivery, and Run returns once
// they are settled.
func (w *Worker) Run(stop, force context.Context) error {
	stop, stopNow := context.WithCancel(stop)
	defer stopNow()
	// Jobs learn of force only once no pull request of this worker is
	// outstanding: a forced job is handed back once, to another worker,
	// instead of landing in a pull of its own and being naked again.
	jobForce, forceJobs := context.WithCancel(context.Background())
	defer forceJobs()
	fetched := make(chan struct{})
	fetchDone := sync.OnceFunc(func() { close(fetched) })
	defer fetchDone()
	defer context.AfterFunc(force, func() {
		stopNow()
		<-fetched
		forceJobs()
	})()

	st, lanes, err := w.setup(stop)
	if err != nil {
		return stoppedOr(stop, err)
	}
	w.stores, w.lanes = st, lanes
	w.setUp.Store(true)

	// Nothing is fetched until the executor answered a first ping, which
	// the prober sends at once: start-up does not wait on it, so the
	// heartbeat says why the worker is not ready yet, however long the
	// executor's infrastructure takes to answer.
	if _, ok := w.exec.(Pinger); ok {
		w.health.down(errNotChecked)
	}

	bg, cancelBg := context.WithCancel(context.Background())
	var bgWG sync.WaitGroup
	if !w.cfg.NoIndex {
		w.index = newIndexer(w.js, w.log)
		bgWG.Go(func() { w.index.run(bg) })
	}
	// Subscribed before the first fetch: a pull is what makes the server
	// give up a job, and publish its advisory.
	unsubscribeDead, err := w.subscribeDeadLetters(bg, &bgWG)
	if err != nil {
		cancelBg()
		return stoppedOr(stop, err)
	}
	defer unsubscribeDead()
	bgWG.Go(func() { w.sweepLoop(bg) })
	bgWG.Go(func() { w.heartbeat(bg) })
	bgWG.Go(func() { w.watchCancels(bg) })
	bgWG.Go(func() { w.probe(bg) })

	w.log.Info("worker started", "slots", w.cfg.Slots, "lanes", strings.Join(laneNames(w.cfg.Queues), " "), "ack_wait", w.cfg.Topology.AckWait)
	var jobsWG sync.WaitGroup
	w.fetchLoop(stop, jobForce, &jobsWG)
	fetchDone()
	w.draining.Store(true)
	w.log.Info("draining", "in_flight", w.busy.Load())
	jobsWG.Wait()

	cancelBg()
	bgWG.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := st.Workers.Delete(ctx, w.cfg.ID); err != nil {
		w.log.Warn("remove heartbeat", "err", err)
	}
	w.log.Info("worker stopped")
	return nil
}

// setup ensures the topology and each lane's consumer. It retries with
// back-off until stop: when a fleet starts, NATS may not accept
// connections yet, and JetStream may have no meta leader ("context deadline
// exceeded") for a while. It gives up only on what no retry can fix: an
// invalid configuration or a connection closed for good (nats.go closes it
// after the same authentication error twice).
func (w *Worker) setup(stop context.Context) (*jobs.Stores, []*lane, error) {
	type topo struct {
		st    *jobs.Stores
		lanes []*lane
	}
	attempt := 0
	t, err := backoff.RetryNotifyWithData(func() (topo, error) {
		attempt++
		st, err := w.cfg.Topology.Ensure(stop, w.js)
		if err == nil {
			var lanes []*lane
			if lanes, err = w.ensureLanes(stop); err == nil {
				if attempt > 1 {
					w.log.Info("JetStream topology ready", "attempt", attempt)
				}
				return topo{st, lanes}, nil
			}
		}
		if errors.Is(err, jobs.ErrInvalidConfig) || errors.Is(err, nats.ErrConnectionClosed) {
			return topo{}, backoff.Permanent(err)
		}
		return topo{}, err
	}, backoff.WithContext(w.cfg.Backoff(), stop), func(err error, d time.Duration) {
		w.log.Warn("JetStream topology not ready; retrying", "attempt", attempt, "err", err, "retry_in", d)
	})
	return t.st, t.lanes, err
}

// fetchLoop hands jobs to free slots until stop, and returns once no pull
// request of this worker is outstanding at the server. While the executor
// is down it pulls nothing (pullWhileUp returns when it goes down).
func (w *Worker) fetchLoop(stop, force context.Context, jobsWG *sync.WaitGroup) {
	slots := make(chan struct{}, w.cfg.Slots)
	var retry backoff.BackOff
	for {
		if err := w.health.wait(stop); err != nil {
			return
		}
		handed, err := w.pullWhileUp(stop, force, slots, jobsWG)
		if stop.Err() != nil {
			return
		}
		if handed > 0 {
			retry = nil
		}
		if err == nil {
			continue // the executor went down
		}
		if retry == nil {
			retry = w.cfg.Backoff()
		}
		d := retry.NextBackOff()
		if d == backoff.Stop {
			d = 30 * time.Second
		}
		w.log.Warn("fetch failed", "err", err, "retry_in", d)
		select {
		case <-time.After(d):
		case <-stop.Done():
			return
		}
	}
}

// handBack naks, at once, what a drained iterator still holds: nothing,
// unless a pull was renewed after missed heartbeats while one was still
// answered. No slot waits for it.
func (w *Worker) handBack(it jetstream.MessagesContext) {
	for {
		msg, err := it.Next(jetstream.NextMaxWait(max(w.cfg.FetchWait, time.Second)))
		if err != nil {
			return
		}
		var dl delivery
		_, dl.id, _ = jobs.ParseSubject(msg.Subject())
		if meta, err := msg.Metadata(); err == nil {
			dl.attempt = int(meta.NumDelivered)
		}
		w.settle(msg, decision{verdict: verdictNak, reason: "pulled with no free slot"}, w.log.With("job_id", dl.id, "attempt", dl.attempt))
	}
}

// heartbeat keeps the worker's entry in WORKERS fresh, and writes it at
// once when the prober learns something of the executor's health.
func (w *Worker) heartbeat(ctx context.Context) {
	t := time.NewTicker(w.cfg.Topology.WorkerTTL / 3)
	defer t.Stop()
	for {
		data, _ := json.Marshal(w.Status())
		if _, err := w.stores.Workers.Put(ctx, w.cfg.ID, data); err != nil && ctx.Err() == nil {
			w.log.Warn("heartbeat", "err", err)
		}
		select {
		case <-t.C:
		case <-w.beat:
		case <-ctx.Done():
			return
		}
	}
}

// watchCancels handles the cancel requests stored in CANCELS: a job
// running here has its context canceled; a job of this queue still queued
// is finished as canceled at once (cancelQueued).
func (w *Worker) watchCancels(ctx context.Context) {
	watch, err := w.stores.Cancels.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		w.log.Error("watch cancel requests; cancel of running jobs will not work", "err", err)
		return
	}
	defer watch.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-watch.Updates():
			if !ok {
				return
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			if !w.cancelRunning(e.Key()) {
				w.cancelQueued(ctx, e.Key())
			}
		}
	}
}

// cancelRunning cancels the job if it runs here, and reports whether it did.
func (w *Worker) cancelRunning(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	found := false
	for r := range w.running {
		if r.id == id {
			w.log.Info("cancel requested", "job_id", r.id)
			r.cancel(ErrCancelRequested)
			found = true
		}
	}
	return found
}

// cancelQueued finishes as canceled a job of one of its lanes that was never
// delivered, so that a client need not wait for a free slot, nor be
// allowed to write RESULTS itself. Every worker of the queue races to do it
// (finalize: one result, one removal). A job already delivered is left to
// its holder, who watches CANCELS too, or to its next delivery, which
// finds the request before running it.
func (w *Worker) cancelQueued(ctx context.Context, id string) {
	if !jobs.ValidID(id) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	log := w.log.With("job_id", id)
	var (
		m  *jetstream.RawStreamMsg
		ln *lane
	)
	for _, l := range w.lanes {
		var err error
		m, err = w.stores.Stream.GetLastMsgForSubject(ctx, jobs.Subject(l.Queue, id))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // another lane's or queue's job, or finished
		}
		if err != nil {
			log.Warn("cancel: look the job up; its next delivery will cancel it", "err", err)
			return
		}
		ln = l
		break
	}
	if ln == nil {
		return
	}
	// The consumer delivers in stream order: a message past its delivered
	// sequence has never been handed to a worker.
	info, err := ln.cons.Info(ctx)
	if err != nil {
		log.Warn("cancel: consumer info; the job's delivery will cancel it", "err", err)
		return
	}
	if m.Sequence <= info.Delivered.Stream {
		return
	}
	if _, removed := w.finalize(ctx, m, 0, jobs.StatusCanceled, jobs.CancelReason, log); removed {
		log.Info("queued job canceled", "status", string(jobs.StatusCanceled))
	}
}

// errNotChecked is why a worker whose executor is a Pinger is not ready
// before its first ping answered.
var errNotChecked = errors.New("executor not checked yet")

// probe keeps the executor's health. While it is up, a Pinger is pinged
// every WorkerTTL/3, so that an idle worker does not claim to be ready on
// an engine that died or a runtime that broke. Once it is down (a Run or a
// ping failed), it is pinged until it answers (see recover) and marked up
// again.
func (w *Worker) probe(ctx context.Context) {
	pinger, _ := w.exec.(Pinger)
	check := time.NewTicker(w.cfg.Topology.WorkerTTL / 3)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-check.C:
			if pinger != nil && w.health.ready() {
				if err := pinger.Ping(ctx); err != nil && ctx.Err() == nil {
					w.log.Error("executor check failed; not fetching until it passes", "err", err)
					w.health.down(err) // kicks the next round
					w.beatNow()
				}
			}
			continue
		case <-w.health.kick:
		}
		if !w.recover(ctx, pinger) {
			return
		}
		w.log.Info("executor up")
		w.health.up()
		w.beatNow()
	}
}

// beatNow has the heartbeat written without waiting for its tick.
func (w *Worker) beatNow() {
	select {
	case w.beat <- struct{}{}:
	default:
	}
}

// recover pings the executor with back-off until it answers, and reports
// false if ctx ended first. Each failure becomes the reason the worker is
// not ready. Without a Pinger it only waits one back-off step: the held
// job's next Run is the probe.
func (w *Worker) recover(ctx context.Context, pinger Pinger) bool {
	b := w.cfg.Backoff()
	for {
		d := b.NextBackOff()
		if d == backoff.Stop {
			d = 30 * time.Second
		}
		if pinger != nil {
			err := pinger.Ping(ctx)
			if ctx.Err() != nil {
				return false
			}
			if err == nil {
				return true
			}
			var hint interface{ RetryAfter() time.Duration }
			if errors.As(err, &hint) {
				d = max(hint.RetryAfter(), 10*time.Millisecond)
			}
			w.log.Warn("executor still down", "err", err, "retry_in", d.Round(time.Millisecond))
			w.health.down(err)
			w.beatNow()
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return false
		}
		if pinger == nil {
			return true
		}
	}
}

// health gates fetching on the executor's infrastructure.
type health struct {
	mu   sync.Mutex
	ok   chan struct{} // closed while up
	gone chan struct{} // closed while down
	err  error
	kick chan struct{} // wakes the prober
}

func newHealth() *health {
	ok := make(chan struct{})
	close(ok)
	return &health{ok: ok, gone: make(chan struct{}), kick: make(chan struct{}, 1)}
}

func (h *health) down(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err = err
	select {
	case <-h.ok:
		h.ok = make(chan struct{})
		close(h.gone)
		select {
		case h.kick <- struct{}{}:
		default:
		}
	default:
	}
}

func (h *health) up() {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.ok:
	default:
		close(h.ok)
		h.gone = make(chan struct{})
	}
}

func (h *health) upCh() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ok
}

// downCh is closed when the executor is (next) reported down.
func (h *health) downCh() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gone
}

func (h *health) ready() bool {
	select {
	case <-h.upCh():
		return true
	default:
		return false
	}
}

func (h *health) lastError() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil || h.ready0() {
		return ""
	}
	return h.err.Error()
}

// ready0 is ready with h.mu held.
func (h *health) ready0() bool {
	select {
	case <-h.ok:
		return true
	default:
		return false
	}
}

func (h *health) wait(ctx context.Context) error {
	select {
	case <-h.upCh():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stoppedOr returns nil when the error is due to a stop: shutting down
// during start-up is not a failure.
func stoppedOr(stop context.Context, err error) error {
	if stop.Err() != nil {
		return nil
	}
	return err
}
