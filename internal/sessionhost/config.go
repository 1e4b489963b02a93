package sessionhost

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// Sandbox is a session's sandbox, as internal/executor's Session is one.
type Sandbox interface {
	Do(ctx context.Context, req *envelope.Request) (*envelope.Reply, error)
	Close(ctx context.Context)
	Done() <-chan struct{}
	Why() string
	ImageID() string
	// Archive archives the sandbox's /workspace into w while it goes on
	// (a persistent session's checkpoint).
	Archive(ctx context.Context, w io.Writer) (*envelope.ArchiveReport, error)
}

// StartSpec is what Start is asked for.
type StartSpec struct {
	ID    string
	Image string
	// Tenant is the session's ("" for the operator's): a template of
	// Image is its own or the operator's.
	Tenant   string
	Limits   limits.Limits
	Env      map[string]string
	Files    map[string]string
	Lifetime time.Duration
	// MaxOutput bounds what a call's reply carries of each stream.
	MaxOutput int64
	// Restore, if set, is the snapshot the sandbox's /workspace starts
	// from (a persistent session's checkpoint, or a fork's source).
	Restore *jobrun.Snapshot
	// OnEvent is told the sandbox's live events (its terminals' output);
	// it must not block.
	OnEvent func(*envelope.Event)
}

// Starter starts a session's sandbox.
type Starter func(ctx context.Context, spec StartSpec) (Sandbox, error)

// Config of a Host. The zero value of each field is its documented
// default.
type Config struct {
	// Worker is the worker's ID, recorded on its sessions.
	Worker string
	// Max is the most sessions the host holds at once. Default 16.
	Max int
	// MaxLifetime caps what a session may ask for max_lifetime. Default
	// 24h.
	MaxLifetime time.Duration
	// MaxIdleTimeout caps what a session may ask for idle_timeout.
	// Default 1h.
	MaxIdleTimeout time.Duration
	// MaxPerToken and MaxPerTenant cap the live sessions (running or
	// resuming, on any worker) one owner, and all the owners of one
	// tenant, hold: a create past them is refused (sessionapi.ErrCap), so
	// that one caller cannot take every worker's room. The operator's
	// own (owner and tenant "") are not counted. Defaults 4 and 8;
	// negative: no cap. Workers count the fleet's records, so give every
	// worker the same caps; creates racing on two workers may pass the
	// cap by one each.
	MaxPerToken  int
	MaxPerTenant int
	// Limits resolves a session's limits against the defaults and caps
	// of its image, looked up as its tenant's ("" for the operator's):
	// a template's, else the worker's, as a job's are.
	Limits func(tenant, image string, l limits.Limits) (limits.Limits, error)
	// Images reports whether the worker serves a preset, or a template
	// the tenant ("" for the operator) may name: its own or the
	// operator's.
	Images func(tenant, image string) bool
	// MaxCalls bounds the calls one session serves at once. Default 16.
	MaxCalls int
	// Observer is told of creates, restores and ends. Default none.
	Observer Observer
	// Logger default slog.Default().
	Logger *slog.Logger

	// Workspaces opens the workspace heads and the snapshots' object
	// store of a tenant ("": of none), where persistent sessions keep
	// their checkpoints; nil: this worker serves no persistent sessions.
	Workspaces func(ctx context.Context, tenant string) (jetstream.KeyValue, jetstream.ObjectStore, error)
	// KeepRevisions is how many checkpoints of a session's workspace
	// keep their snapshots, as a job's revisions. Default 10.
	KeepRevisions int
	// CheckpointQuiet is how long a persistent session that changed
	// stays without a call before it is checkpointed. Default 2 s.
	CheckpointQuiet time.Duration
	// TempDir holds checkpoints on their way (unlinked files). Default
	// os.TempDir().
	TempDir string
	// RefreshAge is the age of a workspace's head past which a checkpoint
	// of an unchanged tree is saved all the same, renewing the
	// workspace's expiry. Default 3h (the fleet's SnapshotRefreshAge).
	RefreshAge time.Duration
	// CheckpointRate and CheckpointBurst bound the bytes one session's
	// checkpoints archive: a token bucket of CheckpointBurst bytes that
	// fills at CheckpointRate bytes a second (ckrate.go). Default 1 MiB a
	// second, 64 MiB.
	CheckpointRate, CheckpointBurst int64
	// TenantCheckpointRate and TenantCheckpointBurst are the same bound
	// for all the sessions of one tenant (of none, for those of no
	// tenant) on this worker. Default 4 MiB a second, 256 MiB.
	TenantCheckpointRate, TenantCheckpointBurst int64
}

func (c *Config) setDefaults() {
	if c.Max <= 0 {
		c.Max = 16
	}
	if c.MaxLifetime <= 0 {
		c.MaxLifetime = 24 * time.Hour
	}
	if c.MaxIdleTimeout <= 0 {
		c.MaxIdleTimeout = time.Hour
	}
	if c.MaxPerToken == 0 {
		c.MaxPerToken = 4
	}
	if c.MaxPerTenant == 0 {
		c.MaxPerTenant = 8
	}
	if c.MaxCalls <= 0 {
		c.MaxCalls = 16
	}
	if c.Limits == nil {
		c.Limits = func(_, _ string, l limits.Limits) (limits.Limits, error) { return l, nil }
	}
	if c.Images == nil {
		c.Images = func(string, string) bool { return true }
	}
	if c.Observer == nil {
		c.Observer = noObserver{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.KeepRevisions <= 0 {
		c.KeepRevisions = 10
	}
	if c.CheckpointQuiet <= 0 {
		c.CheckpointQuiet = 2 * time.Second
	}
	if c.RefreshAge <= 0 {
		c.RefreshAge = 3 * time.Hour
	}
	for _, d := range []struct {
		v   *int64
		def int64
	}{{&c.CheckpointRate, 1 << 20}, {&c.CheckpointBurst, 64 << 20},
		{&c.TenantCheckpointRate, 4 << 20}, {&c.TenantCheckpointBurst, 256 << 20}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
}
