package egressnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/moby/moby/client"
	"github.com/sandfleet/sandfleet/internal/egress"
)

// The proxy's container may restart under the worker: the engine
// restarts it after an OOM kill (its restart policy), an operator may
// stop or kill it. A restarted proxy has forgotten every registration,
// so the worker watches it: every HealthEvery it asks the proxy's health,
// starts the container again if it is found stopped, follows its address
// on the outside network (which a restart may change), and when the
// proxy is a new process (Health.Instance) registers every live sandbox
// with it again. The fleet CA is the worker's, handed to the proxy at
// each start, so the sandboxes' bundles keep trusting it.

// control returns the client of the proxy's control API as it is now.
func (nw *Networks) control() *egress.Control { return nw.ctl.Load() }

// live reports whether the sandbox id is admitted and not yet released.
func (nw *Networks) live(id string) bool {
	nw.regMu.Lock()
	defer nw.regMu.Unlock()
	_, ok := nw.regs[id]
	return ok
}

// connect finds the proxy's address on the outside network and waits,
// for at most within, for its control API to answer there.
func (nw *Networks) connect(ctx context.Context, within time.Duration) (egress.Health, error) {
	in, err := nw.api.ContainerInspect(ctx, nw.container, client.ContainerInspectOptions{})
	if err != nil || in.Container.NetworkSettings == nil {
		return egress.Health{}, fmt.Errorf("egress: inspect the proxy: %v", err)
	}
	outside := in.Container.NetworkSettings.Networks[nw.cfg.Outside]
	if outside == nil || !outside.IPAddress.IsValid() {
		return egress.Health{}, fmt.Errorf("egress: the proxy has no address on %s", nw.cfg.Outside)
	}
	url := fmt.Sprintf("http://%s", net.JoinHostPort(outside.IPAddress.String(), fmt.Sprint(egress.ControlPort)))
	if c := nw.control(); c == nil || c.URL != url {
		nw.ctl.Store(&egress.Control{URL: url, Token: nw.token})
	}
	deadline := time.Now().Add(within)
	for {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		h, err := nw.control().Health(hctx)
		cancel()
		if err == nil {
			return h, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return egress.Health{}, fmt.Errorf("egress: the proxy does not answer on %s: %w", url, err)
		}
		time.Sleep(100 * time.Millisecond) // polling the proxy's start; no event says it listens
	}
}

func (nw *Networks) startWatch() {
	ctx, cancel := context.WithCancel(context.Background())
	nw.stop = cancel
	nw.watching.Add(1)
	go func() {
		defer nw.watching.Done()
		t := time.NewTicker(nw.cfg.HealthEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				nw.check(ctx)
			}
		}
	}()
}

// check asks the proxy's health; a proxy that does not answer is started
// again if it stopped, and a new proxy process gets the registrations.
func (nw *Networks) check(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	h, err := nw.control().Health(hctx)
	cancel()
	if err != nil {
		if h, err = nw.revive(ctx); err != nil {
			if ctx.Err() == nil {
				nw.cfg.Logger.Warn("egress proxy down", "error", err)
			}
			return
		}
	}
	if h.CA != nw.ca.Fingerprint() {
		// Only a container other than the one the worker made would:
		// the sandboxes with secrets would fail TLS with it.
		nw.cfg.Logger.Error("egress proxy has a CA the sandboxes do not trust", "ca_sha256", h.CA)
	}
	nw.regMu.Lock()
	defer nw.regMu.Unlock()
	if h.Instance != nw.instance {
		nw.replayLocked(ctx)
	}
}

// revive starts the proxy's container if it stopped (an engine leaves a
// container it restarted alone) and waits for it to answer.
func (nw *Networks) revive(ctx context.Context) (egress.Health, error) {
	in, err := nw.api.ContainerInspect(ctx, nw.container, client.ContainerInspectOptions{})
	if err != nil {
		return egress.Health{}, fmt.Errorf("egress: inspect the proxy: %w", err)
	}
	if st := in.Container.State; st != nil && !st.Running && !st.Restarting {
		nw.cfg.Logger.Warn("egress proxy stopped; starting it again", "status", st.Status, "exit_code", st.ExitCode, "oom_killed", st.OOMKilled)
		if _, err := nw.api.ContainerStart(ctx, nw.container, client.ContainerStartOptions{}); err != nil {
			return egress.Health{}, fmt.Errorf("egress: start the proxy again: %w", err)
		}
	}
	return nw.connect(ctx, 10*time.Second)
}

// replay registers the live sandboxes with a proxy that forgot them.
func (nw *Networks) replay(ctx context.Context) {
	nw.regMu.Lock()
	defer nw.regMu.Unlock()
	nw.replayLocked(ctx)
}

// replayLocked registers every live sandbox with the proxy as it is now,
// with its policy now; regMu is held. A proxy that still knows them (the
// caller was wrong that it restarted) says so, and that is fine.
func (nw *Networks) replayLocked(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	h, err := nw.control().Health(hctx)
	cancel()
	if err != nil || h.Instance == nw.instance {
		return
	}
	failed := 0
	for id, reg := range nw.regs {
		err := nw.control().Register(ctx, id, reg.IP, reg.Network, reg.Secrets)
		if errors.Is(err, egress.ErrRegistered) {
			continue // registered already: by an earlier replay that failed for another
		}
		if err != nil {
			failed++
			nw.cfg.Logger.Warn("egress: registering a sandbox again", "sandbox", id[:min(12, len(id))], "error", err)
		}
	}
	if failed == 0 {
		nw.instance = h.Instance
	}
	nw.cfg.Logger.Warn("egress proxy restarted: its sandboxes registered again; their egress before it is not accounted",
		"sandboxes", len(nw.regs), "failed", failed)
}
