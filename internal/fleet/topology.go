package fleet

import (
	"errors"
	"fmt"
	"time"
)

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
	// bounded by its worker, after the job's output cap (see internal/worker).
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

// MaxJobBytes is the default cap on the encoded size of one job:
// jobs.MaxJobBytes, which a test holds equal.
const MaxJobBytes = 4 << 20

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

// SnapshotTTL is how long SNAPSHOTS keeps a snapshot after it was put:
// WorkspaceTTL and a quarter more. A head lives WorkspaceTTL after its
// last write, which a step that saves nothing (killed, or its archive
// refused) makes without a new snapshot; such a step puts the latest
// snapshot again when it is older than SnapshotRefreshAge, at its take and
// before its release, so that the snapshot outlives the head: then a
// workspace used every day keeps its files however many of its steps
// save nothing.
func (t Topology) SnapshotTTL() time.Duration {
	t = t.WithDefaults()
	return t.WorkspaceTTL + t.WorkspaceTTL/4
}

// SnapshotRefreshAge is the age past which a step that may save nothing
// puts its workspace's latest snapshot again (see SnapshotTTL): an eighth
// of WorkspaceTTL, so that a workspace's snapshot is put again at most
// that often.
func (t Topology) SnapshotRefreshAge() time.Duration {
	return t.WithDefaults().WorkspaceTTL / 8
}
