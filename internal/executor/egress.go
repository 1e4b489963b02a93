package executor

import (
	"context"

	"github.com/sandfleet/sandfleet/internal/egressnet"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// Egress is what the executor needs of the worker's egress gateway, small
// enough to fake.
type Egress interface {
	// Prepare makes the network of a sandbox with policy n, where the
	// proxy is all it reaches, and says how the sandbox is configured
	// for it: the one hook a sandbox's spec (a job's, a session's) asks.
	Prepare(ctx context.Context, n *limits.Network) (egressnet.Attachment, error)
	// Admit registers a started sandbox's address with its policy; its
	// job must not start before.
	Admit(ctx context.Context, containerID string, att egressnet.Attachment, n *limits.Network) error
	// Update replaces the policy of an admitted sandbox (a session's); n
	// may grant nothing.
	Update(ctx context.Context, containerID string, att egressnet.Attachment, n *limits.Network) error
	// Usage is the sandbox's egress so far.
	Usage(ctx context.Context, containerID string) ([]limits.NetworkUse, error)
	// Release forgets the sandbox and returns its egress.
	Release(ctx context.Context, containerID string) ([]limits.NetworkUse, error)
	// Drop removes what Prepare made, once the sandbox's container is gone.
	Drop(ctx context.Context, att egressnet.Attachment) error
}

var _ Egress = (*egressnet.Networks)(nil)
