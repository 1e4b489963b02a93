package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

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
	err := lookUp(ctx, func(ctx context.Context) (err error) {
		st.Stream, err = js.Stream(ctx, StreamName)
		return err
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return t.ensure(ctx, js, maker{js: js, leaveExisting: true})
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", StreamName, err)
	}
	for _, b := range []struct {
		name string
		kv   *jetstream.KeyValue
	}{{ResultsBucket, &st.Results}, {WorkersBucket, &st.Workers}, {CancelsBucket, &st.Cancels}} {
		err = lookUp(ctx, func(ctx context.Context) (err error) {
			*b.kv, err = js.KeyValue(ctx, b.name)
			return err
		})
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return t.ensure(ctx, js, maker{js: js, leaveExisting: true})
		}
		if err != nil {
			return nil, fmt.Errorf("bucket %s: %w", b.name, err)
		}
	}
	return st, nil
}

// lookUpTimeout bounds one JetStream API request of Open: in a cluster a
// request can go unanswered (a stream's leader being elected), and the
// caller's deadline may be minutes away.
const lookUpTimeout = 5 * time.Second

// lookUp runs f, a JetStream API request, under lookUpTimeout, again
// while its own deadline, not ctx's, is what ended it.
func lookUp(ctx context.Context, f func(context.Context) error) error {
	for {
		actx, cancel := context.WithTimeout(ctx, lookUpTimeout)
		err := f(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
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

// WorkspaceStores are the JetStream objects of workspaces and artifacts.
type WorkspaceStores struct {
	Heads     jetstream.KeyValue    // WORKSPACES
	Snapshots jetstream.ObjectStore // SNAPSHOTS
	Artifacts jetstream.ObjectStore // ARTIFACTS
}

// ErrNoWorkspaces: the fleet keeps no workspaces (its workers predate
// them, or none ever started).
var ErrNoWorkspaces = errors.New("this fleet keeps no workspaces (no WORKSPACES bucket)")

// ObjectStores are the object stores of one tenant (or of no tenant):
// its workspaces' snapshots and its jobs' artifacts.
type ObjectStores struct {
	Snapshots jetstream.ObjectStore // SnapshotsBucketOf(tenant)
	Artifacts jetstream.ObjectStore // ArtifactsBucketOf(tenant)
}

// EnsureWorkspaces creates or updates the workspace buckets: WORKSPACES
// expires after WorkspaceTTL without a step, SNAPSHOTS after SnapshotTTL,
// ARTIFACTS with the results (ResultTTL). Workers call it; clients use OpenWorkspaces.
// A tenant's object stores are made on first use (EnsureObjects).
func (t Topology) EnsureWorkspaces(ctx context.Context, js jetstream.JetStream) (*WorkspaceStores, error) {
	return t.ensureWorkspaces(ctx, maker{js: js})
}

func (t Topology) ensureWorkspaces(ctx context.Context, m maker) (*WorkspaceStores, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	t = t.WithDefaults()
	ws := &WorkspaceStores{}
	var err error
	ws.Heads, err = m.keyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      WorkspacesBucket,
		Description: "sandfleet workspace heads by name",
		TTL:         t.WorkspaceTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    t.Replicas,
	}, t.headLimits())
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", WorkspacesBucket, storageErr(err, "KV_"+WorkspacesBucket, t.WorkspacesMaxBytes))
	}
	objs, err := t.ensureObjects(ctx, m, "")
	if err != nil {
		return nil, err
	}
	ws.Snapshots, ws.Artifacts = objs.Snapshots, objs.Artifacts
	return ws, nil
}

// headLimits are the caps of WORKSPACES: a head that exists is never
// pushed out (its workspace would be lost), a new one is refused past the
// caps.
func (t Topology) headLimits() caps {
	return caps{maxBytes: t.WorkspacesMaxBytes, maxMsgs: t.WorkspacesMaxKeys, maxMsgSize: MaxHeadBytes, noRollups: true}
}

// EnsureObjects creates or updates the object stores of tenant ("": of no
// tenant): snapshots expire after SnapshotTTL, artifacts with the results
// (ResultTTL). Workers call it when a tenant's job first needs them.
func (t Topology) EnsureObjects(ctx context.Context, js jetstream.JetStream, tenant string) (ObjectStores, error) {
	return t.ensureObjects(ctx, maker{js: js}, tenant)
}

func (t Topology) ensureObjects(ctx context.Context, m maker, tenant string) (ObjectStores, error) {
	if tenant != "" && !ValidTenant(tenant) {
		return ObjectStores{}, fmt.Errorf("%w: tenant %q must match [a-z0-9][a-z0-9-]{0,31}", ErrInvalidConfig, tenant)
	}
	t = t.WithDefaults()
	obj := func(name, desc string, ttl time.Duration, maxBytes int64) (jetstream.ObjectStore, error) {
		o, err := m.objectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      name,
			Description: desc,
			TTL:         ttl,
			Storage:     jetstream.FileStorage,
			Replicas:    t.Replicas,
			Compression: true,
		}, caps{maxBytes: maxBytes, maxMsgSize: objectMaxMsgBytes})
		if err != nil {
			return nil, fmt.Errorf("object store %s: %w", name, storageErr(err, "OBJ_"+name, maxBytes))
		}
		return o, nil
	}
	var o ObjectStores
	var err error
	of := ""
	if tenant != "" {
		of = " of tenant " + tenant
	}
	if o.Snapshots, err = obj(SnapshotsBucketOf(tenant), "sandfleet workspace snapshots"+of+": <workspace>/<revision>.<take>", t.SnapshotTTL(), t.SnapshotsMaxBytes); err != nil {
		return ObjectStores{}, err
	}
	if o.Artifacts, err = obj(ArtifactsBucketOf(tenant), "sandfleet artifacts"+of+": <job id>/<run>/<path>", t.ResultTTL, t.ArtifactsMaxBytes); err != nil {
		return ObjectStores{}, err
	}
	return o, nil
}

// OpenWorkspaces binds the workspace buckets without creating them:
// ErrNoWorkspaces when they do not exist.
func OpenWorkspaces(ctx context.Context, js jetstream.JetStream) (*WorkspaceStores, error) {
	ws := &WorkspaceStores{}
	var err error
	if ws.Heads, err = js.KeyValue(ctx, WorkspacesBucket); err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, ErrNoWorkspaces
		}
		return nil, fmt.Errorf("bucket %s: %w", WorkspacesBucket, err)
	}
	if ws.Snapshots, err = js.ObjectStore(ctx, SnapshotsBucket); err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, ErrNoWorkspaces
		}
		return nil, fmt.Errorf("object store %s: %w", SnapshotsBucket, err)
	}
	if ws.Artifacts, err = js.ObjectStore(ctx, ArtifactsBucket); err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, ErrNoWorkspaces
		}
		return nil, fmt.Errorf("object store %s: %w", ArtifactsBucket, err)
	}
	return ws, nil
}
