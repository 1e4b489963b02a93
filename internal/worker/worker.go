package worker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/internal/workspace"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// Executor runs one job. It returns a Result for every outcome of the job
// itself, rejected included, and an error only when the infrastructure
// failed (the job is then retried, not charged). internal/executor implements it.
type Executor interface {
	Run(ctx context.Context, job *jobs.Job, opts jobrun.Options) (*jobs.Result, error)
}

// Pinger is implemented by executors that can cheaply check their
// infrastructure (the Docker daemon). The worker fetches nothing until a
// first Ping succeeded, pings every WorkerTTL/3 while it serves, and after
// an infrastructure error (of Run or Ping) stops fetching until Ping
// succeeds again, pinging with back-off; without Pinger, it retries Run
// after a back-off. A Ping error that has a method RetryAfter()
// time.Duration sets the delay before the next ping instead: the executor
// knows when trying again can help (internal/executor's StartError does).
type Pinger interface {
	Ping(ctx context.Context) error
}

// PoolReporter is implemented by executors with a warm pool (internal/executor):
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
	ErrCancelRequested = errors.New(fleet.CancelReason)
)

// Worker pulls jobs of one or more queues (lanes) and runs them on an
// Executor.
type Worker struct {
	cfg   Config
	js    jetstream.JetStream
	exec  Executor
	log   *slog.Logger
	obs   Observer
	start time.Time

	stores *fleet.Stores
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
	cancels map[string]time.Time // what watchCancels has read of CANCELS, when it has read it all; else nil

	objMu   sync.Mutex
	objects map[string]fleet.ObjectStores // tenants' object stores, made on first use (workspace.go)
	events  map[string]bool               // tenants whose events stream this worker has ensured (events.go)
	snaps   *workspace.Cache              // the snapshots saved last
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
	w := &Worker{
		cfg:     cfg,
		js:      js,
		exec:    exec,
		log:     cfg.Logger.With("worker", cfg.ID, "queue", queueNames(cfg.Queues)),
		obs:     cfg.Observer,
		start:   time.Now().UTC(),
		health:  newHealth(),
		beat:    make(chan struct{}, 1),
		running: map[*run]struct{}{},
		objects: map[string]fleet.ObjectStores{},
		events:  map[string]bool{},
		snaps:   workspace.NewCache(workspace.CacheBytes),
	}
	// Nothing is fetched until the executor answered a first ping, which
	// the prober sends once the topology is set up: until then the
	// heartbeat, /status and the executor's gauge say it is not checked,
	// not up.
	if _, ok := exec.(Pinger); ok {
		w.health.down(errNotChecked)
	}
	return w, nil
}

// ID returns the worker's ID as used in results and WORKERS.
func (w *Worker) ID() string { return w.cfg.ID }

// Ready reports whether the worker has set up its JetStream topology and
// believes the executor's infrastructure up.
func (w *Worker) Ready() bool { return w.setUp.Load() && w.health.ready() }

// Held returns how many jobs are held, their leases kept alive, waiting for
// the executor's infrastructure to come back.
func (w *Worker) Held() int { return int(w.held.Load()) }

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

	// The prober sends the first ping at once (see New): start-up does
	// not wait on it, so the heartbeat says why the worker is not ready
	// yet, however long the executor's infrastructure takes to answer.

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
func (w *Worker) setup(stop context.Context) (*fleet.Stores, []*lane, error) {
	type topo struct {
		st    *fleet.Stores
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
		d := retryIn(retry)
		w.log.Warn("fetch failed", "err", err, "retry_in", d)
		if !sleep(stop, d) {
			return
		}
	}
}

// retryIn is b's next delay, or 30 s once b has stopped: the loops that
// use it retry for as long as the worker runs.
func retryIn(b backoff.BackOff) time.Duration {
	if d := b.NextBackOff(); d != backoff.Stop {
		return d
	}
	return 30 * time.Second
}

// sleep waits for d, or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
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
		_, id, _ := fleet.ParseSubject(msg.Subject())
		attempt := 0
		if meta, err := msg.Metadata(); err == nil {
			attempt = int(meta.NumDelivered)
		}
		w.settle(msg, decision{verdict: verdictNak, reason: "pulled with no free slot"}, w.log.With("job_id", id, "attempt", attempt))
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
