package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Names of the JetStream objects sandfleet uses. They are part of the wire
// contract: any NATS client may publish to SubjectPrefix+"<queue>.<id>" and
// read RESULTS.
const (
	StreamName    = "JOBS"
	SubjectPrefix = "jobs."
	ResultsBucket = "RESULTS"
	WorkersBucket = "WORKERS"
	CancelsBucket = "CANCELS"
)

// Subject returns the subject a job is published on: jobs.<queue>.<id>.
func Subject(queue, id string) string { return SubjectPrefix + queue + "." + id }

// ConsumerName returns the durable pull consumer that serves a queue.
func ConsumerName(queue string) string { return "workers-" + queue }

// ErrBadSubject is returned by ParseSubject for a subject that is not
// jobs.<queue>.<id>.
var ErrBadSubject = errors.New("subject is not jobs.<queue>.<id>")

// ParseSubject splits jobs.<queue>.<id>, where a tenant's id is
// <tenant>.<id> (jobs.<queue>.<tenant>.<id>). It checks the shape only; the
// queue and ID formats are Validate's to check.
func ParseSubject(subject string) (queue, id string, err error) {
	rest, ok := strings.CutPrefix(subject, SubjectPrefix)
	if !ok {
		return "", "", fmt.Errorf("%w: %q", ErrBadSubject, subject)
	}
	queue, id, ok = strings.Cut(rest, ".")
	if !ok || queue == "" || id == "" || strings.Count(id, ".") > 1 || strings.HasPrefix(id, ".") || strings.HasSuffix(id, ".") {
		return "", "", fmt.Errorf("%w: %q", ErrBadSubject, subject)
	}
	return queue, id, nil
}

// Topology configures the stream, consumers and KV buckets. Workers create
// or update them (Ensure), so every worker of a fleet should use the same
// Topology: the last writer's settings win. Clients create only what does
// not exist yet (Open), and leave the rest as the workers set it.
// The zero value of each field means its documented default.
type Topology struct {
	// Replicas of the stream and the buckets. Default 1; 3 on a 3-node cluster.
	Replicas int
	// DuplicateWindow is how long the stream remembers a Nats-Msg-Id to
	// drop a second publish of it, for bare publishers that set one
	// (Submit does not: one message per subject keeps a job from being
	// queued twice, and the window spans every tenant). Default 10m.
	DuplicateWindow time.Duration
	// MaxMsgs is the most jobs queued at once; past it Submit fails with
	// ErrQueueFull (DiscardNew). Default 100000.
	MaxMsgs int64
	// MaxBytes is the most bytes queued at once. Default 1 GiB.
	MaxBytes int64
	// MaxJobBytes caps the encoded size of one job, in the client and the
	// worker. Default MaxJobBytes (4 MiB). The server's max_payload must
	// admit it (the embedded server allows 8 MiB; a stock nats-server 1 MiB).
	MaxJobBytes int
	// AckWait is the lease a worker holds on a job; it is extended with
	// InProgress every AckWait/3 while the job runs. Default 30s.
	AckWait time.Duration
	// MaxDeliver is how many times a job is delivered before it is given up.
	// Default 5.
	MaxDeliver int
	// MaxAckPending bounds the jobs in flight per queue across the fleet.
	// Default 1000; set it to the fleet's total slots to make it exact.
	MaxAckPending int
	// ResultTTL is how long results are kept in RESULTS. Default 24h.
	ResultTTL time.Duration
	// WorkerTTL is how long a worker's heartbeat stays in WORKERS. Default
	// 15s; workers beat every WorkerTTL/3.
	WorkerTTL time.Duration
	// CancelWait is how long Cancel waits for the worker running a job to
	// store its canceled result (with the worker's figures) before storing
	// one itself, which is how a queued job gets its result. Default 2s.
	CancelWait time.Duration
	// EventsMaxAge is how long a job's events (its live output and
	// lifecycle, stream EVENTS) are kept. Default 1h. RESULTS keeps the
	// result for ResultTTL either way.
	EventsMaxAge time.Duration
	// EventsMaxBytes bounds the stream EVENTS as a whole; past it the
	// oldest events go first. Default 1 GiB. What one job may put there is
	// bounded by its worker, after the job's output cap (see pkg/worker).
	EventsMaxBytes int64
	// WorkspaceTTL is how long a workspace is kept after its last step
	// (WORKSPACES and SNAPSHOTS). Default 24h.
	WorkspaceTTL time.Duration
	// IndexMaxBytes bounds the stream INDEX (index.go), the job records
	// the console lists; past it the oldest records go first. Default
	// 512 MiB. Records are kept as long as results (ResultTTL).
	IndexMaxBytes int64
}

// WithDefaults returns t with every zero field set to its default.
func (t Topology) WithDefaults() Topology {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	defI := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defI(&t.Replicas, 1)
	defD(&t.DuplicateWindow, 10*time.Minute)
	def(&t.MaxMsgs, 100_000)
	def(&t.MaxBytes, 1<<30)
	defI(&t.MaxJobBytes, MaxJobBytes)
	defD(&t.AckWait, 30*time.Second)
	defI(&t.MaxDeliver, 5)
	defI(&t.MaxAckPending, 1000)
	defD(&t.ResultTTL, 24*time.Hour)
	defD(&t.WorkerTTL, 15*time.Second)
	defD(&t.CancelWait, 2*time.Second)
	defD(&t.EventsMaxAge, time.Hour)
	def(&t.EventsMaxBytes, 1<<30)
	defD(&t.WorkspaceTTL, 24*time.Hour)
	def(&t.IndexMaxBytes, 512<<20)
	return t
}

// ErrInvalidConfig is wrapped by every configuration error.
var ErrInvalidConfig = errors.New("invalid configuration")

func badField(field string, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

// Validate checks t after defaults and names the first bad field.
func (t Topology) Validate() error {
	t = t.WithDefaults()
	switch {
	case t.Replicas < 1 || t.Replicas > 5:
		return badField("Replicas", "%d is not within 1..5", t.Replicas)
	case t.DuplicateWindow < 0:
		return badField("DuplicateWindow", "%s is negative", t.DuplicateWindow)
	case t.MaxMsgs < 0:
		return badField("MaxMsgs", "%d is negative", t.MaxMsgs)
	case t.MaxBytes < 0:
		return badField("MaxBytes", "%d is negative", t.MaxBytes)
	case t.MaxJobBytes < 0:
		return badField("MaxJobBytes", "%d is negative", t.MaxJobBytes)
	case t.AckWait < time.Second:
		return badField("AckWait", "%s is under 1s", t.AckWait)
	case t.MaxDeliver < 1:
		return badField("MaxDeliver", "%d is under 1", t.MaxDeliver)
	case t.MaxAckPending < 1:
		return badField("MaxAckPending", "%d is under 1", t.MaxAckPending)
	case t.ResultTTL < time.Second:
		return badField("ResultTTL", "%s is under 1s", t.ResultTTL)
	case t.WorkerTTL < time.Second:
		return badField("WorkerTTL", "%s is under 1s", t.WorkerTTL)
	case t.CancelWait < 0:
		return badField("CancelWait", "%s is negative", t.CancelWait)
	case t.EventsMaxAge < time.Second:
		return badField("EventsMaxAge", "%s is under 1s", t.EventsMaxAge)
	case t.EventsMaxBytes < 0:
		return badField("EventsMaxBytes", "%d is negative", t.EventsMaxBytes)
	case t.WorkspaceTTL < time.Second:
		return badField("WorkspaceTTL", "%s is under 1s", t.WorkspaceTTL)
	case t.IndexMaxBytes < 0:
		return badField("IndexMaxBytes", "%d is negative", t.IndexMaxBytes)
	}
	return nil
}

// Stores are the JetStream objects of a Topology, once ensured.
type Stores struct {
	Stream  jetstream.Stream
	Results jetstream.KeyValue // job ID → Result JSON; first writer wins
	Workers jetstream.KeyValue // worker ID → Heartbeat JSON, with a TTL
	Cancels jetstream.KeyValue // job ID → cancel request, watched by workers
	// Workspaces holds the workspace buckets; set by Ensure (workers), not
	// by Open (a client opens them on first use).
	Workspaces *WorkspaceStores

	// MaxResultBytes is the most an encoded Result may take in RESULTS: the
	// server's max_payload less room for the message's subject and headers.
	// StoreResult shortens a result's output to fit it.
	MaxResultBytes int
}

// resultRoom is what a stored result may take on the server js talks to.
func resultRoom(js jetstream.JetStream) int {
	const headroom = 8 << 10
	if nc := js.Conn(); nc != nil && nc.MaxPayload() > 2*headroom {
		return int(nc.MaxPayload()) - headroom
	}
	return 1<<20 - headroom // a stock server's max_payload
}

// Ensure creates or updates the streams JOBS, EVENTS and INDEX, the buckets
// RESULTS, WORKERS and CANCELS, and the workspace buckets
// (EnsureWorkspaces). It is idempotent and safe to call from every
// process.
func (t Topology) Ensure(ctx context.Context, js jetstream.JetStream) (*Stores, error) {
	return t.ensure(ctx, js, maker{js: js})
}

// ensure is Ensure, making each stream and bucket with m: Ensure's
// updates those that exist, Open's leaves them as they are.
func (t Topology) ensure(ctx context.Context, js jetstream.JetStream, m maker) (*Stores, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	t = t.WithDefaults()
	stream, err := m.stream(ctx, jetstream.StreamConfig{
		Name:        StreamName,
		Description: "sandfleet jobs: jobs.<queue>.<id>",
		Subjects:    []string{SubjectPrefix + ">"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardNew,
		MaxMsgs:     t.MaxMsgs,
		MaxBytes:    t.MaxBytes,
		// One message per subject, and so per job ID in a queue: a job
		// submitted again after the duplicate window while it is still
		// queued or running is refused (Submit calls it queued), not run
		// a second time beside the first.
		MaxMsgsPerSubject:    1,
		DiscardNewPerSubject: true,
		// Leave room for headers around the largest job.
		MaxMsgSize: int32(t.MaxJobBytes + 64<<10),
		Duplicates: t.DuplicateWindow,
		Replicas:   t.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", StreamName, err)
	}
	kv := func(name, desc string, ttl time.Duration) (jetstream.KeyValue, error) {
		b, err := m.keyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      name,
			Description: desc,
			TTL:         ttl,
			Storage:     jetstream.FileStorage,
			Replicas:    t.Replicas,
		})
		if err != nil {
			return nil, fmt.Errorf("bucket %s: %w", name, err)
		}
		return b, nil
	}
	st := &Stores{Stream: stream, MaxResultBytes: resultRoom(js)}
	if st.Results, err = kv(ResultsBucket, "sandfleet results by job ID", t.ResultTTL); err != nil {
		return nil, err
	}
	if st.Workers, err = kv(WorkersBucket, "sandfleet worker heartbeats", t.WorkerTTL); err != nil {
		return nil, err
	}
	if st.Cancels, err = m.noRollups(ctx, jetstream.KeyValueConfig{Bucket: CancelsBucket, Description: "sandfleet cancel requests by job ID",
		TTL: t.ResultTTL, Storage: jetstream.FileStorage, Replicas: t.Replicas}); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", CancelsBucket, err)
	}
	if _, err = m.stream(ctx, t.eventsConfig()); err != nil {
		return nil, fmt.Errorf("stream %s: %w", EventsStreamName, err)
	}
	if _, err = m.stream(ctx, t.indexConfig()); err != nil {
		return nil, fmt.Errorf("stream %s: %w", IndexStreamName, err)
	}
	if st.Workspaces, err = t.ensureWorkspaces(ctx, m); err != nil {
		return nil, err
	}
	return st, nil
}

// eventsConfig is the stream of the jobs' events: limits retention, so
// that watchers replay it from the start; kept for EventsMaxAge; the
// oldest events give way when it is full, so that the jobs running now
// can be watched.
func (t Topology) eventsConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        EventsStreamName,
		Description: "sandfleet job events (live output, lifecycle): events.<id>",
		Subjects:    []string{EventSubjectPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardOld,
		MaxAge:      t.EventsMaxAge,
		MaxBytes:    t.EventsMaxBytes,
		// An event holds at most a 16 KiB chunk of output (4/3 of it in
		// base64), or a result without its output.
		MaxMsgSize: 1 << 20,
		Replicas:   t.Replicas,
		// A job's last event by a direct get of its subject: the form a
		// tenant's permissions can name (events.<tenant>.*).
		AllowDirect: true,
	}
}

// indexConfig is the stream of the job index (index.go): one record per
// subject, so a job is there once, at its latest change; kept as long as
// results; the oldest records give way when it is full. Direct gets let
// readers page through it without a consumer.
func (t Topology) indexConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              IndexStreamName,
		Description:       "sandfleet job index (the console's lists): index.job.<queue>.<batch>.<id>, index.spec.<id>, index.dead.<id>",
		Subjects:          []string{IndexSubjectPrefix + ">"},
		Retention:         jetstream.LimitsPolicy,
		Storage:           jetstream.FileStorage,
		Discard:           jetstream.DiscardOld,
		MaxAge:            t.ResultTTL,
		MaxBytes:          t.IndexMaxBytes,
		MaxMsgsPerSubject: 1,
		MaxMsgSize:        128 << 10,
		AllowDirect:       true,
		Replicas:          t.Replicas,
	}
}

// Open returns the stream and buckets, creating (with t's settings) those
// that do not exist yet but leaving existing ones as they are: clients use
// it, so that only workers decide the settings of a running fleet. It does
// not look at EVENTS, which only Follow reads, and which a fleet's workers
// create.
func (t Topology) Open(ctx context.Context, js jetstream.JetStream) (*Stores, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	st := &Stores{MaxResultBytes: resultRoom(js)}
	var err error
	st.Stream, err = js.Stream(ctx, StreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return t.ensure(ctx, js, maker{js: js, keep: true})
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", StreamName, err)
	}
	for _, b := range []struct {
		name string
		kv   *jetstream.KeyValue
	}{{ResultsBucket, &st.Results}, {WorkersBucket, &st.Workers}, {CancelsBucket, &st.Cancels}} {
		*b.kv, err = js.KeyValue(ctx, b.name)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return t.ensure(ctx, js, maker{js: js, keep: true})
		}
		if err != nil {
			return nil, fmt.Errorf("bucket %s: %w", b.name, err)
		}
	}
	return st, nil
}

// EnsureConsumer creates or updates the durable pull consumer of a queue,
// workers-<queue>, filtered to jobs.<queue>.>.
func (t Topology) EnsureConsumer(ctx context.Context, js jetstream.JetStream, queue string) (jetstream.Consumer, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if !ValidQueue(queue) {
		return nil, badField("queue", "%q must match [A-Za-z0-9_-]{1,64}", queue)
	}
	t = t.WithDefaults()
	c, err := js.CreateOrUpdateConsumer(ctx, StreamName, jetstream.ConsumerConfig{
		Durable:       ConsumerName(queue),
		Description:   "sandfleet workers of queue " + queue,
		FilterSubject: SubjectPrefix + queue + ".>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       t.AckWait,
		MaxDeliver:    t.MaxDeliver,
		MaxAckPending: t.MaxAckPending,
		// Each worker keeps at most one pull request open at a time.
		MaxWaiting: 512,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", ConsumerName(queue), err)
	}
	return c, nil
}

// WorkerStatus is a worker's heartbeat, stored in WORKERS under its ID and
// refreshed every WorkerTTL/3; a worker gone silent expires with the TTL.
type WorkerStatus struct {
	ID        string    `json:"id"`
	Queue     string    `json:"queue"`            // the heaviest of Queues
	Queues    []string  `json:"queues,omitempty"` // the lanes served, "name:weight", heaviest first
	Version   string    `json:"version"`
	Slots     int       `json:"slots"`
	Busy      int       `json:"busy"`
	Ready     bool      `json:"ready"`              // false while the executor is down
	Draining  bool      `json:"draining,omitempty"` // no longer fetching
	LastError string    `json:"last_error,omitempty"`
	StartedAt time.Time `json:"started_at"`
	LastSeen  time.Time `json:"last_seen"`
	// Pool is the executor's warm pool, when it has one.
	Pool *PoolStatus `json:"pool,omitempty"`
}

// PoolStatus is a worker's warm pool: sandboxes started ahead of their
// jobs (pkg/executor).
type PoolStatus struct {
	Size   int   `json:"size"`   // the target per preset image
	Idle   int   `json:"idle"`   // warm sandboxes ready now, all images
	Hits   int64 `json:"hits"`   // jobs that took a warm sandbox
	Misses int64 `json:"misses"` // jobs that could have, found none and started one
	// Halted: the pool does not refill, because sandboxes do not start.
	Halted bool `json:"halted,omitempty"`
}

// maker makes streams and buckets: creating those that do not exist, and
// updating those that do to the configuration given, or with keep leaving
// them as they are. A client that opens a fleet's topology while its
// workers still set it up (the gateway beside an embedded worker) makes
// what is missing with the defaults, and the workers' settings, written
// before or after, are what stays. One window is left: a tenant-writable
// bucket the client makes itself has its rollups turned off by an update
// of the configuration it read, which a worker's update in the round trip
// between would lose (the worker's next Ensure writes it again).
type maker struct {
	js   jetstream.JetStream
	keep bool
}

func (m maker) stream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if !m.keep {
		return m.js.CreateOrUpdateStream(ctx, cfg)
	}
	s, err := m.js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return m.js.Stream(ctx, cfg.Name)
	}
	return s, err
}

func (m maker) keyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if !m.keep {
		return m.js.CreateOrUpdateKeyValue(ctx, cfg)
	}
	kv, err := m.js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		return m.js.KeyValue(ctx, cfg.Bucket)
	}
	return kv, err
}

func (m maker) objectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	if !m.keep {
		return m.js.CreateOrUpdateObjectStore(ctx, cfg)
	}
	o, err := m.js.CreateObjectStore(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		return m.js.ObjectStore(ctx, cfg.Bucket)
	}
	return o, err
}

// noRollups makes a bucket whose stream refuses rollups: tenants publish
// into CANCELS and WORKSPACES, each on its own keys' subjects only, and a
// Nats-Rollup: all header on such a publish would purge every tenant's
// keys (permissions see subjects, not headers). nats.go makes a bucket
// with rollups on, and turns them back on at each update: a bucket that
// exists is updated here instead, with cfg's description, TTL and
// replicas as nats.go would set them, and rollups off; with keep, only its
// rollups are turned off. Keys are removed by delete, which needs none.
func (m maker) noRollups(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	js := m.js
	name := "KV_" + cfg.Bucket
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err = js.CreateKeyValue(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return nil, err
		}
		s, err = js.Stream(ctx, name)
	}
	if err != nil {
		return nil, err
	}
	sc := s.CachedInfo().Config
	switch {
	case m.keep && !sc.AllowRollup:
		return js.KeyValue(ctx, cfg.Bucket)
	case m.keep:
		sc.AllowRollup = false
	default:
		sc.Description, sc.MaxAge, sc.AllowRollup = cfg.Description, cfg.TTL, false
		sc.Duplicates = 2 * time.Minute
		if cfg.TTL > 0 && cfg.TTL < sc.Duplicates {
			sc.Duplicates = cfg.TTL
		}
		if cfg.Replicas > 0 {
			sc.Replicas = cfg.Replicas
		}
	}
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		return nil, err
	}
	return js.KeyValue(ctx, cfg.Bucket)
}
