package jobs

import (
	"fmt"
	"time"

	"github.com/sandfleet/sandfleet/internal/fleet"
)

// Config is a client's own settings. The zero value of each field means
// its default. The fleet's stream and buckets are its workers' to set:
// a client that finds one missing creates it with the defaults, and the
// workers' settings are what stays.
type Config struct {
	// MaxJobBytes caps the encoded size of one job: Submit refuses a
	// larger one with ErrInvalidJob. Defaults to MaxJobBytes (4 MiB); the
	// workers refuse jobs over their own cap whatever the client's.
	MaxJobBytes int
	// CancelWait is how long Cancel waits for the worker running a job to
	// store its canceled result (with the worker's figures) before storing
	// one itself, which is how a queued job gets its result. Defaults to
	// 2s.
	CancelWait time.Duration
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.MaxJobBytes == 0 {
		c.MaxJobBytes = MaxJobBytes
	}
	if c.CancelWait == 0 {
		c.CancelWait = 2 * time.Second
	}
	return c
}

// Validate checks c after defaults and names the first bad field; its
// errors wrap ErrInvalidConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.MaxJobBytes < 0:
		return badField("MaxJobBytes", "%d is negative", c.MaxJobBytes)
	case c.CancelWait < 0:
		return badField("CancelWait", "%s is negative", c.CancelWait)
	}
	return nil
}

// topology is the topology a client opens: the defaults, and c's cap
// on a job's size for the stream it creates when there is none.
func (c Config) topology() fleet.Topology {
	return fleet.Topology{MaxJobBytes: c.MaxJobBytes, CancelWait: c.CancelWait}
}

func badField(field string, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}
