package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"runtime"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/retry"
	"github.com/sandfleet/sandfleet/pkg/jobs"
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
	Topology fleet.Topology
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
	// snapshots (a fork may start from any of them). Default 10; 2 to
	// MaxKeepRevisions.
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

// MaxKeepRevisions bounds Config.KeepRevisions: a head naming the
// snapshot of each of them, with the longest names, stays well within
// fleet.MaxHeadBytes, the cap of a value of WORKSPACES.
const MaxKeepRevisions = 100

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
		c.Backoff = retry.Policy{Initial: 250 * time.Millisecond, Max: 30 * time.Second}.Func()
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
	case c.KeepRevisions > MaxKeepRevisions:
		return bad("KeepRevisions", "%d is over %d (the head names each kept snapshot, within fleet.MaxHeadBytes)", c.KeepRevisions, MaxKeepRevisions)
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
