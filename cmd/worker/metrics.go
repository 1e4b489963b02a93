package main

import (
	"context"
	"net/http"
	"slices"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/metrics"
	"github.com/sandfleet/sandfleet/internal/sessionhost"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// otherPreset labels the jobs whose image is not one of the worker's
// presets: the field is the submitter's, and a label value per made-up
// name would grow the series without bound.
const otherPreset = "other"

// presetLister is implemented by executors that know their presets
// (internal/executor); without it every job is labeled otherPreset.
type presetLister interface{ Presets() []string }

// poolStatser is implemented by executors with a warm pool (internal/executor).
type poolStatser interface{ PoolStats() executor.PoolStats }

// unremovabler is implemented by executors that retry the removals that
// failed (internal/executor).
type unremovabler interface{ Unremovable() int }

// unremovableMax is how many containers the executor may fail to remove
// (and retry in the background) before /readyz says the worker is not
// ready: one now and then is an engine's hiccup that the retries clear;
// more mean an engine that keeps sandboxes (and their uids, memory and
// processes) it was told to remove, which an operator should look at.
const unremovableMax = 5

// unremovable returns how many containers exec is failing to remove, read
// at each call; 0 for an executor that does not say.
func unremovable(exec any) func() int {
	if u, ok := exec.(unremovabler); ok {
		return u.Unremovable
	}
	return func() int { return 0 }
}

// jobMetrics are the worker's Prometheus metrics, on a registry of their own:
// the worker.Observer counters, and gauges read from the worker, the NATS
// connection and the executor's pool at scrape time.
type jobMetrics struct {
	reg     *metrics.Registry
	presets []string

	finished     *metrics.CounterVec
	duration     *metrics.HistogramVec
	queueWait    *metrics.Histogram
	deliveries   *metrics.Counter
	redeliveries *metrics.Counter
	deadLetters  *metrics.Counter
	egressBytes  *metrics.CounterVec
	egressConns  *metrics.CounterVec

	sessionsCreated  *metrics.Counter
	sessionsRestored *metrics.Counter
	sessionsEnded    *metrics.CounterVec
}

var _ worker.Observer = (*jobMetrics)(nil)

// newMetrics registers the Go and process metrics and the job metrics on
// reg. presets bounds the values of the preset label.
func newMetrics(reg *metrics.Registry, presets []string) *jobMetrics {
	reg.Runtime()
	return &jobMetrics{
		reg:     reg,
		presets: presets,
		finished: reg.CounterVec("sandfleet_jobs_finished_total",
			"Jobs whose result this worker stored, by status and preset (\"other\": not a preset of this worker).",
			"status", "preset"),
		duration: reg.HistogramVec("sandfleet_job_duration_seconds",
			"Wall-clock time of the jobs that ran in a sandbox (the result's duration_ms), by preset.",
			[]float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}, "preset"),
		queueWait: reg.Histogram("sandfleet_job_queue_wait_seconds",
			"Time from a job's publication (queued_at) to the start of its sandbox (started_at), earlier attempts included.",
			[]float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}),
		deliveries: reg.Counter("sandfleet_job_deliveries_total",
			"Job messages delivered to this worker, redeliveries included."),
		redeliveries: reg.Counter("sandfleet_job_redeliveries_total",
			"Deliveries of a job that had been delivered before (attempt > 1): a lease ran out, or a worker handed the job back."),
		deadLetters: reg.Counter("sandfleet_dead_letters_total",
			"Jobs given up after MaxDeliver deliveries that this worker finalized with an error result."),
		egressBytes: reg.CounterVec("sandfleet_egress_bytes_total",
			"Bytes the jobs' sandboxes sent (out) and received (in) through the egress proxy, by queue, as their results account them.",
			"queue", "direction"),
		egressConns: reg.CounterVec("sandfleet_egress_connections_total",
			"Connections (and plain HTTP requests' upstream connections) of the jobs' sandboxes through the egress proxy, by queue and verdict: allowed or denied.",
			"queue", "verdict"),
		sessionsCreated: reg.Counter("sandfleet_sessions_created_total",
			"Sessions this worker started."),
		sessionsRestored: reg.Counter("sandfleet_sessions_restored_total",
			"Sessions this worker resumed from their last checkpoint."),
		sessionsEnded: reg.CounterVec("sandfleet_sessions_ended_total",
			"Sessions of this worker that ended, by reason: deleted, idle and lifetime (the expiries), lost, shutdown.",
			"reason"),
	}
}

var _ sessionhost.Observer = (*jobMetrics)(nil)

func (m *jobMetrics) Created()  { m.sessionsCreated.Inc() }
func (m *jobMetrics) Restored() { m.sessionsRestored.Inc() }
func (m *jobMetrics) Ended(reason string) {
	switch reason {
	case sessions.EndDeleted, sessions.EndIdle, sessions.EndLifetime, sessions.EndLost, sessions.EndShutdown:
	default:
		reason = "other" // a label value per made-up reason would grow the series without bound
	}
	m.sessionsEnded.With(reason).Inc()
}

var sessionsByState = metrics.Desc{Name: "sandfleet_sessions", Type: metrics.GaugeType, Labels: []string{"state"},
	Help: "Sessions this worker holds now, by state (starting: their sandbox is being made)."}

// sessionStatser is what watchSessions reads: a *sessionhost.Host.
type sessionStatser interface{ Stats() sessionhost.Stats }

// watchSessions registers the gauges of the worker's sessions: by state,
// and its capacity (--sessions).
func (m *jobMetrics) watchSessions(h sessionStatser) {
	m.reg.Collect(func() []metrics.Family {
		st := h.Stats()
		return []metrics.Family{sessionsByState.Family(
			metrics.Sample{Labels: []string{"state", "running"}, Value: float64(st.Live)},
			metrics.Sample{Labels: []string{"state", "starting"}, Value: float64(st.Starting)},
		)}
	}, sessionsByState)
	m.reg.GaugeFunc("sandfleet_sessions_max", "Sessions this worker holds at most (--sessions).", func() float64 { return float64(h.Stats().Max) })
}

func (m *jobMetrics) preset(p string) string {
	if slices.Contains(m.presets, p) {
		return p
	}
	return otherPreset
}

func (m *jobMetrics) Delivered(attempt int) {
	m.deliveries.Inc()
	if attempt > 1 {
		m.redeliveries.Inc()
	}
}

func (m *jobMetrics) Finished(res *jobs.Result, preset, queue string) {
	preset = m.preset(preset)
	m.finished.With(string(res.Status), preset).Inc()
	for _, u := range res.Egress {
		verdict := "denied"
		if u.Allowed {
			verdict = "allowed"
		}
		m.egressConns.With(queue, verdict).Add(uint64(max(0, u.Connections)))
		m.egressBytes.With(queue, "out").Add(uint64(max(0, u.BytesOut)))
		m.egressBytes.With(queue, "in").Add(uint64(max(0, u.BytesIn)))
	}
	if res.StartedAt == nil {
		return // it never ran: no duration, no queue wait
	}
	if res.DurationMS != nil {
		m.duration.With(preset).Observe(float64(*res.DurationMS) / 1000)
	}
	if res.QueuedAt != nil {
		m.queueWait.Observe(max(0, res.StartedAt.Sub(*res.QueuedAt).Seconds()))
	}
}

func (m *jobMetrics) DeadLettered() { m.deadLetters.Inc() }

// watched is what watch reads: a *worker.Worker.
type watched interface {
	laneReader
	Status() jobs.WorkerStatus
	Held() int
	Ready() bool
}

// watch registers the gauges read at scrape time: the worker's slots and
// state, the NATS connection and, if exec has one, the warm pool.
func (m *jobMetrics) watch(w watched, natsUp func() bool, exec any) {
	st := w.Status()
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	m.reg.GaugeFunc("sandfleet_worker_info", "Always 1; the labels name the worker, its queue and version.",
		func() float64 { return 1 }, "queue", st.Queue, "version", st.Version, "worker", st.ID)
	m.reg.GaugeFunc("sandfleet_slots", "Jobs this worker runs at once (--slots).", func() float64 { return float64(st.Slots) })
	m.reg.GaugeFunc("sandfleet_slots_busy", "Slots holding a job now.", func() float64 { return float64(w.Status().Busy) })
	m.reg.GaugeFunc("sandfleet_jobs_held", "Jobs held, leases kept alive, while the sandbox infrastructure is down.", func() float64 { return float64(w.Held()) })
	m.reg.GaugeFunc("sandfleet_executor_ready", "1 while the sandbox infrastructure (Docker) is believed up, else 0: nothing is fetched.", func() float64 { return b(w.Status().Ready) })
	stuck := unremovable(exec)
	m.reg.GaugeFunc("sandfleet_ready", "1 when /readyz answers 200: NATS connected, topology set up, executor up, fewer than 5 containers it cannot remove.",
		func() float64 { return b(natsUp() && w.Ready() && stuck() < unremovableMax) })
	m.reg.GaugeFunc("sandfleet_sandboxes_unremovable", "Containers of this worker whose removal failed and is being retried in the background; their uids stay claimed until they are gone. /readyz fails from 5.",
		func() float64 { return float64(stuck()) })
	m.reg.GaugeFunc("sandfleet_draining", "1 once a drain began: no more jobs are fetched.", func() float64 { return b(w.Status().Draining) })
	m.reg.Collect(laneFamilies(w), laneDescs...)
	ps, ok := exec.(poolStatser)
	if !ok {
		return
	}
	counter := func(name, help string, f func(executor.PoolStats) int64) {
		m.reg.CounterFunc(name, help, func() float64 { return float64(f(ps.PoolStats())) })
	}
	m.reg.GaugeFunc("sandfleet_pool_size", "Warm sandboxes kept per preset image now: --pool, grown up to --pool-max while jobs drain the pool (0: no pool).", func() float64 { return float64(ps.PoolStats().Size) })
	m.reg.GaugeFunc("sandfleet_pool_idle", "Warm sandboxes ready now, all images.", func() float64 { return float64(ps.PoolStats().Idle) })
	counter("sandfleet_pool_hits_total", "Jobs handed to a warm sandbox.", func(s executor.PoolStats) int64 { return s.Hits })
	counter("sandfleet_pool_misses_total", "Pool-eligible jobs that found no warm sandbox ready.", func(s executor.PoolStats) int64 { return s.Misses })
	counter("sandfleet_pool_waited_total", "Of the misses, jobs handed a warm sandbox whose launch was in flight instead of a fresh one.", func(s executor.PoolStats) int64 { return s.Waited })
	counter("sandfleet_pool_launch_failures_total", "Launches of warm sandboxes that failed.", func(s executor.PoolStats) int64 { return s.Failures })
	m.reg.GaugeFunc("sandfleet_pool_halted", "1 while the pool does not refill because sandboxes do not start.", func() float64 { return b(ps.PoolStats().Halted) })
}

func (m *jobMetrics) handler() http.Handler { return m.reg.Handler() }

// metricDescs are the metrics a worker serves with --metrics, --sessions
// and a warm pool: its registrations, made on a worker that never starts.
func metricDescs() []metrics.Desc {
	m := newMetrics(metrics.NewRegistry(), nil)
	m.watch(unstarted{}, func() bool { return false }, unstarted{})
	m.watchSessions(unstarted{})
	return m.reg.Describe()
}

// unstarted stands for the worker, its pool and its sessions in
// metricDescs: registering reads none of them but the worker's status.
type unstarted struct{}

func (unstarted) Lanes(context.Context) ([]worker.LaneStats, error) { return nil, worker.ErrNotSetUp }
func (unstarted) Status() jobs.WorkerStatus                         { return jobs.WorkerStatus{} }
func (unstarted) Held() int                                         { return 0 }
func (unstarted) Ready() bool                                       { return false }
func (unstarted) PoolStats() executor.PoolStats                     { return executor.PoolStats{} }
func (unstarted) Unremovable() int                                  { return 0 }
func (unstarted) Stats() sessionhost.Stats                          { return sessionhost.Stats{} }
