package executor

import (
	"context"

	"github.com/sandfleet/sandfleet/internal/egress"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// Egress is what the executor needs of the worker's egress gateway, small
// enough to fake.
type Egress interface {
	// Attachment is the network and environment of a sandbox with policy
	// n: the one hook a sandbox's spec (a job's, a session's) asks.
	Attachment(n *limits.Network) egress.Attachment
	// Admit registers a started sandbox's address with its policy; its
	// job must not start before.
	Admit(ctx context.Context, containerID string, n *limits.Network) error
	// Release forgets the sandbox and returns its egress.
	Release(ctx context.Context, containerID string) ([]limits.NetworkUse, error)
}

var _ Egress = (*egress.Gateway)(nil)

// egressEnv is the environment a job with limits l adds under its own:
// the proxy's, for a job with a network.
func (e *Executor) egressEnv(l limits.Limits) map[string]string {
	if l.Network == nil || e.cfg.Egress == nil {
		return nil
	}
	return e.cfg.Egress.Attachment(l.Network).Env
}
