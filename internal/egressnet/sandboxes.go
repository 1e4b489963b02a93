package egressnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/egress"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// The registrations of a worker's sandboxes with its proxy: Networks
// keeps the live ones, so that a restarted proxy gets them again
// (watch.go).

// registration is a live sandbox's policy as the worker registered it.
type registration struct {
	IP      netip.Addr
	Network *limits.Network
	Secrets []egress.Secret
}

// Admit registers the sandbox container id, started on att's network,
// with its policy: its job must not start before.
func (nw *Networks) Admit(ctx context.Context, id string, att Attachment, n *limits.Network) error {
	in, err := nw.api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
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
	secrets, err := pick(nw.cfg.Secrets, n)
	if err != nil {
		return err
	}
	reg := registration{IP: ep.IPAddress, Network: n, Secrets: secrets}
	nw.regMu.Lock()
	defer nw.regMu.Unlock()
	if err := nw.control().Register(ctx, id, reg.IP, n, secrets); err != nil {
		return err
	}
	nw.regs[id] = reg
	return nil
}

// Update replaces the policy of the admitted sandbox id (a session's):
// n may grant nothing. Secrets need the CA bundle the sandbox was made
// with (att.CABundle).
func (nw *Networks) Update(ctx context.Context, id string, att Attachment, n *limits.Network) error {
	if n == nil {
		n = &limits.Network{}
	}
	if len(n.Secrets) > 0 && att.CABundle == "" {
		return errors.New("egress: secrets for a sandbox made without them (it has no CA bundle to trust the proxy by)")
	}
	secrets, err := pick(nw.cfg.Secrets, n)
	if err != nil {
		return err
	}
	nw.regMu.Lock()
	defer nw.regMu.Unlock()
	err = nw.control().Update(ctx, id, n, secrets)
	if errors.Is(err, egress.ErrUnknownSandbox) && nw.regs[id].IP.IsValid() {
		// The proxy restarted since: the watch has not replayed yet.
		nw.replayLocked(ctx)
		err = nw.control().Update(ctx, id, n, secrets)
	}
	if err != nil {
		return err
	}
	if reg, ok := nw.regs[id]; ok {
		reg.Network, reg.Secrets = n, secrets
		nw.regs[id] = reg
	}
	return nil
}

// Usage returns the sandbox id's egress so far. A proxy restarted since
// the sandbox was admitted accounts only what came after its restart.
func (nw *Networks) Usage(ctx context.Context, id string) ([]limits.NetworkUse, error) {
	use, err := nw.control().Usage(ctx, id)
	if errors.Is(err, egress.ErrUnknownSandbox) && nw.live(id) {
		nw.replay(ctx)
		use, err = nw.control().Usage(ctx, id)
	}
	return use, err
}

// Release forgets the sandbox id and returns its egress (since the
// proxy's last restart, if it restarted).
func (nw *Networks) Release(ctx context.Context, id string) ([]limits.NetworkUse, error) {
	nw.regMu.Lock()
	defer nw.regMu.Unlock()
	_, live := nw.regs[id]
	delete(nw.regs, id)
	use, err := nw.control().Release(ctx, id)
	if errors.Is(err, egress.ErrUnknownSandbox) && live {
		return nil, nil // a restarted proxy never knew it: nothing to forget
	}
	return use, err
}
