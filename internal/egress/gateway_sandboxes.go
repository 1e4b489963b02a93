package egress

import (
	"context"
	"errors"
	"fmt"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/pkg/limits"
)

// The registrations of a worker's sandboxes with its proxy: the gateway
// keeps the live ones, so that a restarted proxy gets them again
// (gateway_watch.go).

// Admit registers the sandbox container id, started on att's network,
// with its policy: its job must not start before.
func (g *Gateway) Admit(ctx context.Context, id string, att Attachment, n *limits.Network) error {
	in, err := g.api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return fmt.Errorf("egress: inspect the sandbox: %w", err)
	}
	var ep *network.EndpointSettings
	if in.Container.NetworkSettings != nil {
		ep = in.Container.NetworkSettings.Networks[att.Network]
	}
	if ep == nil || !ep.IPAddress.IsValid() {
		return fmt.Errorf("egress: the sandbox has no address on %s", att.Network)
	}
	secrets, err := pick(g.cfg.Secrets, n)
	if err != nil {
		return err
	}
	reg := registration{IP: ep.IPAddress, Network: n, Secrets: secrets}
	g.regMu.Lock()
	defer g.regMu.Unlock()
	if err := g.control().Register(ctx, id, reg.IP, n, secrets); err != nil {
		return err
	}
	g.regs[id] = reg
	return nil
}

// Update replaces the policy of the admitted sandbox id (a session's):
// n may grant nothing. Secrets need the CA bundle the sandbox was made
// with (att.CABundle).
func (g *Gateway) Update(ctx context.Context, id string, att Attachment, n *limits.Network) error {
	if n == nil {
		n = &limits.Network{}
	}
	if len(n.Secrets) > 0 && att.CABundle == "" {
		return errors.New("egress: secrets for a sandbox made without them (it has no CA bundle to trust the proxy by)")
	}
	secrets, err := pick(g.cfg.Secrets, n)
	if err != nil {
		return err
	}
	g.regMu.Lock()
	defer g.regMu.Unlock()
	err = g.control().Update(ctx, id, n, secrets)
	if isNotFound(err) && g.regs[id].IP.IsValid() {
		// The proxy restarted since: the watch has not replayed yet.
		g.replayLocked(ctx)
		err = g.control().Update(ctx, id, n, secrets)
	}
	if err != nil {
		return err
	}
	if reg, ok := g.regs[id]; ok {
		reg.Network, reg.Secrets = n, secrets
		g.regs[id] = reg
	}
	return nil
}

// Usage returns the sandbox id's egress so far. A proxy restarted since
// the sandbox was admitted accounts only what came after its restart.
func (g *Gateway) Usage(ctx context.Context, id string) ([]limits.NetworkUse, error) {
	use, err := g.control().Usage(ctx, id)
	if isNotFound(err) && g.live(id) {
		g.replay(ctx)
		use, err = g.control().Usage(ctx, id)
	}
	return use, err
}

// Release forgets the sandbox id and returns its egress (since the
// proxy's last restart, if it restarted).
func (g *Gateway) Release(ctx context.Context, id string) ([]limits.NetworkUse, error) {
	g.regMu.Lock()
	defer g.regMu.Unlock()
	_, live := g.regs[id]
	delete(g.regs, id)
	use, err := g.control().Release(ctx, id)
	if isNotFound(err) && live {
		return nil, nil // a restarted proxy never knew it: nothing to forget
	}
	return use, err
}
