package jobs

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/pkg/limits"
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
	// ResultsMaxBytes bounds the bucket RESULTS; past it the oldest
	// results go first, before their ResultTTL, so that a new result is
	// always stored. Default 1 GiB.
	ResultsMaxBytes int64
	// CancelsMaxKeys and CancelsMaxBytes bound the bucket CANCELS, which
	// tenants write; past either the oldest requests go first (a request
	// matters while its job is queued or running: the newest are those
	// that do). Defaults 100000 and 64 MiB. A request's value is at most
	// MaxCancelBytes.
	CancelsMaxKeys  int64
	CancelsMaxBytes int64
	// WorkspacesMaxKeys and WorkspacesMaxBytes bound the bucket WORKSPACES
	// (the heads), which tenants write too; past either a new workspace is
	// refused (its job ends rejected, naming the cap) while those that
	// exist go on. Defaults 100000 and 256 MiB. A head is at most
	// MaxHeadBytes.
	WorkspacesMaxKeys  int64
	WorkspacesMaxBytes int64
	// SnapshotsMaxBytes is the quota of each tenant's workspace snapshots
	// (SNAPSHOTS_<tenant>, and SNAPSHOTS for workspaces of no tenant);
	// past it a step's revision is not saved and its job ends as error,
	// QuotaReason. Default 2 GiB.
	SnapshotsMaxBytes int64
	// ArtifactsMaxBytes is the quota of each tenant's artifacts
	// (ARTIFACTS_<tenant>, and ARTIFACTS); past it a job's files are not
	// stored and it ends as error, QuotaReason. Default 1 GiB.
	ArtifactsMaxBytes int64
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
	// TenantMaxConsumers caps the consumers on a stream of one tenant's
	// own (EVENTS_<t>): the follows the tenant may have open at once.
	// Default 256. Its consumers, durable or not, are removed once idle
	// for tenantConsumerIdle.
	TenantMaxConsumers int
}

// tenantConsumerIdle is the longest a consumer on a tenant's stream is
// kept without a pull: the server removes it then, durable or not, so
// none a tenant forgets (or leaves on purpose) holds its place for good.
// A follow pulls far more often.
const tenantConsumerIdle = 5 * time.Minute

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
	def(&t.ResultsMaxBytes, 1<<30)
	def(&t.CancelsMaxKeys, 100_000)
	def(&t.CancelsMaxBytes, 64<<20)
	def(&t.WorkspacesMaxKeys, 100_000)
	def(&t.WorkspacesMaxBytes, 256<<20)
	def(&t.SnapshotsMaxBytes, 2<<30)
	def(&t.ArtifactsMaxBytes, 1<<30)
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
	defI(&t.TenantMaxConsumers, 256)
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
	case t.ResultsMaxBytes < 1<<20:
		return badField("ResultsMaxBytes", "%d is under 1 MiB", t.ResultsMaxBytes)
	case t.CancelsMaxKeys < 1:
		return badField("CancelsMaxKeys", "%d is under 1", t.CancelsMaxKeys)
	case t.CancelsMaxBytes < 64<<10:
		return badField("CancelsMaxBytes", "%d is under 64 KiB", t.CancelsMaxBytes)
	case t.WorkspacesMaxKeys < 1:
		return badField("WorkspacesMaxKeys", "%d is under 1", t.WorkspacesMaxKeys)
	case t.WorkspacesMaxBytes < MaxHeadBytes:
		return badField("WorkspacesMaxBytes", "%d is under a head's %d bytes", t.WorkspacesMaxBytes, MaxHeadBytes)
	case t.SnapshotsMaxBytes < 1<<20:
		return badField("SnapshotsMaxBytes", "%d is under 1 MiB", t.SnapshotsMaxBytes)
	case t.ArtifactsMaxBytes < 1<<20:
		return badField("ArtifactsMaxBytes", "%d is under 1 MiB", t.ArtifactsMaxBytes)
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
	case t.TenantMaxConsumers < 1:
		return badField("TenantMaxConsumers", "%d is under 1", t.TenantMaxConsumers)
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
		return nil, fmt.Errorf("stream %s: %w", StreamName, storageErr(err, StreamName, t.MaxBytes))
	}
	kv := func(name, desc string, ttl time.Duration, lim caps) (jetstream.KeyValue, error) {
		b, err := m.keyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      name,
			Description: desc,
			TTL:         ttl,
			Storage:     jetstream.FileStorage,
			Replicas:    t.Replicas,
		}, lim)
		if err != nil {
			return nil, fmt.Errorf("bucket %s: %w", name, storageErr(err, "KV_"+name, lim.maxBytes))
		}
		return b, nil
	}
	st := &Stores{Stream: stream, MaxResultBytes: resultRoom(js)}
	if st.Results, err = kv(ResultsBucket, "sandfleet results by job ID", t.ResultTTL,
		caps{maxBytes: t.ResultsMaxBytes, discardOld: true}); err != nil {
		return nil, err
	}
	if st.Workers, err = kv(WorkersBucket, "sandfleet worker heartbeats", t.WorkerTTL,
		caps{maxBytes: workersMaxBytes, maxMsgSize: maxHeartbeatBytes, discardOld: true}); err != nil {
		return nil, err
	}
	if st.Cancels, err = kv(CancelsBucket, "sandfleet cancel requests by job ID", t.ResultTTL,
		caps{maxBytes: t.CancelsMaxBytes, maxMsgs: t.CancelsMaxKeys, maxMsgSize: MaxCancelBytes, discardOld: true, noRollups: true}); err != nil {
		return nil, err
	}
	if _, err = m.stream(ctx, t.eventsConfig()); err != nil {
		return nil, fmt.Errorf("stream %s: %w", EventsStreamName, storageErr(err, EventsStreamName, t.EventsMaxBytes))
	}
	if _, err = m.stream(ctx, t.indexConfig()); err != nil {
		return nil, fmt.Errorf("stream %s: %w", IndexStreamName, storageErr(err, IndexStreamName, t.IndexMaxBytes))
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
// EVENTS holds the events of jobs of no tenant (events.<id>: one token);
// a tenant's are in a stream of its own (eventsConfigOf).
func (t Topology) eventsConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        EventsStreamName,
		Description: "sandfleet job events (live output, lifecycle): events.<id>",
		Subjects:    []string{EventSubjectPrefix + "*"},
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

// eventsConfigOf is the stream of tenant t's jobs' events: EVENTS' settings
// on events.<t>.*, and a cap on its consumers (which only t and the
// operator create), each removed once idle.
func (t Topology) eventsConfigOf(tenant string) jetstream.StreamConfig {
	cfg := t.eventsConfig()
	cfg.Name = EventsStreamOf(tenant)
	cfg.Description = "sandfleet job events of tenant " + tenant + ": events." + tenant + ".<id>"
	cfg.Subjects = []string{EventSubjectPrefix + tenant + ".*"}
	cfg.MaxConsumers = t.TenantMaxConsumers
	cfg.ConsumerLimits = jetstream.StreamConsumerLimits{InactiveThreshold: tenantConsumerIdle}
	return cfg
}

// EnsureTenantEvents creates or updates the stream of tenant t's jobs'
// events (EventsStreamOf): a worker does, before it publishes the first
// event of t's it has seen, as workers know no tenants before their jobs
// name them.
func (t Topology) EnsureTenantEvents(ctx context.Context, js jetstream.JetStream, tenant string) error {
	if !ValidTenant(tenant) {
		return fmt.Errorf("%w: tenant %q must match [a-z0-9][a-z0-9-]{0,31}", ErrInvalidConfig, tenant)
	}
	cfg := t.WithDefaults().eventsConfigOf(tenant)
	if _, err := (maker{js: js}).stream(ctx, cfg); err != nil {
		return fmt.Errorf("stream %s: %w", cfg.Name, err)
	}
	return nil
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

// Caps of the values sandfleet writes to the buckets tenants can write
// too, so that a value of another size is refused by the server.
const (
	// MaxCancelBytes is the most a value of CANCELS may take: a
	// CancelRequest takes under a hundred bytes.
	MaxCancelBytes = 1 << 10
	// MaxHeadBytes is the most a value of WORKSPACES may take: a head
	// naming the snapshots of the most revisions a worker keeps
	// (pkg/worker's MaxKeepRevisions) takes under a third of it.
	MaxHeadBytes = 64 << 10
	// A worker's heartbeat (WORKERS) takes a few hundred bytes.
	maxHeartbeatBytes = 64 << 10
	workersMaxBytes   = 16 << 20
	// objectMaxMsgBytes bounds one message of an object store: nats.go
	// puts objects in chunks of 128 KiB.
	objectMaxMsgBytes = 1 << 20
)

// caps are the limits of a bucket's stream, set by UpdateStream: nats.go
// offers some of them in its configurations but not all (no key count,
// no discard policy), and sets its own again at each of its updates.
type caps struct {
	maxBytes   int64 // bytes of the whole stream
	maxMsgs    int64 // messages (a KV bucket's keys, its deletes included); 0: no cap
	maxMsgSize int32 // one value; 0: no cap
	// discardOld makes room for a new message by removing the oldest;
	// otherwise the new one is refused. nats.go makes a bucket refuse.
	discardOld bool
	// noRollups refuses a Nats-Rollup header: tenants publish into CANCELS
	// and WORKSPACES, each on its own keys' subjects only, and a rollup
	// of the whole subject space on such a publish would purge every
	// tenant's keys (permissions see subjects, not headers). Keys are
	// removed by delete, which needs none.
	noRollups bool
}

// apply sets the caps on sc.
func (l caps) apply(sc *jetstream.StreamConfig) {
	sc.MaxBytes = l.maxBytes
	sc.MaxMsgs, sc.MaxMsgSize = -1, -1
	if l.maxMsgs > 0 {
		sc.MaxMsgs = l.maxMsgs
	}
	if l.maxMsgSize > 0 {
		sc.MaxMsgSize = l.maxMsgSize
	}
	sc.Discard = jetstream.DiscardNew
	if l.discardOld {
		sc.Discard = jetstream.DiscardOld
	}
	if l.noRollups {
		sc.AllowRollup = false
	}
}

// keyValue makes a bucket: nats.go creates one that does not exist, and
// UpdateStream then sets what sandfleet wants of it, never nats.go's own
// update (which would turn rollups back on and drop the caps until ours):
// cfg's description, TTL and replicas as nats.go would set them, and
// lim. With keep, a bucket that exists is left as it is but for its
// rollups, turned off if lim says so.
func (m maker) keyValue(ctx context.Context, cfg jetstream.KeyValueConfig, lim caps) (jetstream.KeyValue, error) {
	cfg.MaxBytes, cfg.MaxValueSize = lim.maxBytes, lim.maxMsgSize
	err := m.tune(ctx, "KV_"+cfg.Bucket, lim, func() (bool, error) {
		_, err := m.js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			return false, nil
		}
		return err == nil, err
	}, func(sc *jetstream.StreamConfig) {
		sc.Description, sc.MaxAge = cfg.Description, cfg.TTL
		if cfg.Replicas > 0 {
			sc.Replicas = cfg.Replicas
		}
		sc.Duplicates = 2 * time.Minute
		if cfg.TTL > 0 && cfg.TTL < sc.Duplicates {
			sc.Duplicates = cfg.TTL
		}
	})
	if err != nil {
		return nil, err
	}
	return m.js.KeyValue(ctx, cfg.Bucket)
}

// objectStore makes an object store as keyValue makes a bucket.
func (m maker) objectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig, lim caps) (jetstream.ObjectStore, error) {
	cfg.MaxBytes = lim.maxBytes
	err := m.tune(ctx, "OBJ_"+cfg.Bucket, lim, func() (bool, error) {
		_, err := m.js.CreateObjectStore(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			return false, nil
		}
		return err == nil, err
	}, func(sc *jetstream.StreamConfig) {
		sc.Description, sc.MaxAge = cfg.Description, cfg.TTL
		if cfg.Replicas > 0 {
			sc.Replicas = cfg.Replicas
		}
	})
	if err != nil {
		return nil, err
	}
	return m.js.ObjectStore(ctx, cfg.Bucket)
}

// tune makes the stream of a bucket (create, when it does not exist) and
// updates its configuration with set and lim when they change it. An
// existing stream with keep gets only its rollups turned off.
func (m maker) tune(ctx context.Context, name string, lim caps, create func() (made bool, err error), set func(*jetstream.StreamConfig)) error {
	js := m.js
	keep := m.keep
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		var made bool
		if made, err = create(); err != nil {
			return err
		}
		// A client that keeps (Open) and made it sets nothing but its
		// rollups (below, from a fresh read): anything more could land
		// over a worker's caps written in between, and the workers'
		// Ensure at their start sets the rest. Made by another meanwhile,
		// it is set as the maker says: a worker as t says, a client that
		// keeps not at all beyond rollups.
		if made && keep && !lim.noRollups {
			return nil
		}
		s, err = js.Stream(ctx, name)
	}
	if err != nil {
		return err
	}
	old := s.CachedInfo().Config
	sc := old
	switch {
	case keep && lim.noRollups:
		sc.AllowRollup = false
	case keep:
	default:
		set(&sc)
		lim.apply(&sc)
	}
	if reflect.DeepEqual(sc, old) {
		return nil
	}
	_, err = js.UpdateStream(ctx, sc)
	return err
}

// QuotaReason begins the error of a result whose job reached a quota or a
// cap of the fleet's storage (QuotaError): a stable text, as CancelReason.
const QuotaReason = "quota exceeded"

// StoreFull reports whether a write failed because the stream written is
// at one of its caps (its bytes or messages, where the stream refuses
// new ones): the server answers so only for these and for a stream being
// closed.
func StoreFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrStoreFailed
}

// storageErr names the cap of a stream the server refused to make or
// update because it cannot reserve the cap's bytes: every cap is
// reserved on the server's JetStream storage (max_file_store), and the
// caps of all the streams, each tenant's object stores included, must fit
// in it.
func storageErr(err error, stream string, maxBytes int64) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jsErrStorageResourcesExceeded || apiErr.ErrorCode == jsErrInsufficientResources) {
		return &StorageReserveError{Stream: stream, MaxBytes: maxBytes, Err: err}
	}
	return err
}

// JetStream's error codes of a server that is out of storage to reserve
// (nats.go names neither).
const (
	jsErrInsufficientResources    jetstream.ErrorCode = 10023
	jsErrStorageResourcesExceeded jetstream.ErrorCode = 10047
)

// StorageReserveError: the server cannot reserve a stream's cap.
type StorageReserveError struct {
	Stream   string
	MaxBytes int64
	Err      error
}

func (e *StorageReserveError) Error() string {
	return fmt.Sprintf("the server cannot reserve the %s of the cap of %s: the caps of the streams together are over its JetStream storage (max_file_store; by default 75%% of the free disk): lower the caps or give JetStream more storage: %v",
		limits.Size(e.MaxBytes), e.Stream, e.Err)
}

func (e *StorageReserveError) Unwrap() error { return e.Err }
