package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/moby/moby/client"
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
func (g *Gateway) control() *Control { return g.ctl.Load() }

// live reports whether the sandbox id is admitted and not yet released.
func (g *Gateway) live(id string) bool {
	g.regMu.Lock()
	defer g.regMu.Unlock()
	_, ok := g.regs[id]
	return ok
}

// connect finds the proxy's address on the outside network and waits,
// for at most within, for its control API to answer there.
func (g *Gateway) connect(ctx context.Context, within time.Duration) (Health, error) {
	in, err := g.api.ContainerInspect(ctx, g.container, client.ContainerInspectOptions{})
	if err != nil || in.Container.NetworkSettings == nil {
		return Health{}, fmt.Errorf("egress: inspect the proxy: %v", err)
	}
	outside := in.Container.NetworkSettings.Networks[g.cfg.Outside]
	if outside == nil || !outside.IPAddress.IsValid() {
		return Health{}, fmt.Errorf("egress: the proxy has no address on %s", g.cfg.Outside)
	}
	url := fmt.Sprintf("http://%s", net.JoinHostPort(outside.IPAddress.String(), fmt.Sprint(ControlPort)))
	if c := g.control(); c == nil || c.URL != url {
		g.ctl.Store(&Control{URL: url, Token: g.token})
	}
	deadline := time.Now().Add(within)
	for {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		h, err := g.control().Health(hctx)
		cancel()
		if err == nil {
			return h, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return Health{}, fmt.Errorf("egress: the proxy does not answer on %s: %w", url, err)
		}
		time.Sleep(100 * time.Millisecond) // polling the proxy's start; no event says it listens
	}
}

func (g *Gateway) startWatch() {
	ctx, cancel := context.WithCancel(context.Background())
	g.stop = cancel
	g.watching.Add(1)
	go func() {
		defer g.watching.Done()
		t := time.NewTicker(g.cfg.HealthEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				g.check(ctx)
			}
		}
	}()
}

// check asks the proxy's health; a proxy that does not answer is started
// again if it stopped, and a new proxy process gets the registrations.
func (g *Gateway) check(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	h, err := g.control().Health(hctx)
	cancel()
	if err != nil {
		if h, err = g.revive(ctx); err != nil {
			if ctx.Err() == nil {
				g.cfg.Logger.Warn("egress proxy down", "error", err)
			}
			return
		}
	}
	if h.CA != g.ca.Fingerprint() {
		// Only a container other than the one the worker made would:
		// the sandboxes with secrets would fail TLS with it.
		g.cfg.Logger.Error("egress proxy has a CA the sandboxes do not trust", "ca_sha256", h.CA)
	}
	g.regMu.Lock()
	defer g.regMu.Unlock()
	if h.Instance != g.instance {
		g.replayLocked(ctx)
	}
}

// revive starts the proxy's container if it stopped (an engine leaves a
// container it restarted alone) and waits for it to answer.
func (g *Gateway) revive(ctx context.Context) (Health, error) {
	in, err := g.api.ContainerInspect(ctx, g.container, client.ContainerInspectOptions{})
	if err != nil {
		return Health{}, fmt.Errorf("egress: inspect the proxy: %w", err)
	}
	if st := in.Container.State; st != nil && !st.Running && !st.Restarting {
		g.cfg.Logger.Warn("egress proxy stopped; starting it again", "status", st.Status, "exit_code", st.ExitCode, "oom_killed", st.OOMKilled)
		if _, err := g.api.ContainerStart(ctx, g.container, client.ContainerStartOptions{}); err != nil {
			return Health{}, fmt.Errorf("egress: start the proxy again: %w", err)
		}
	}
	return g.connect(ctx, 10*time.Second)
}

// replay registers the live sandboxes with a proxy that forgot them.
func (g *Gateway) replay(ctx context.Context) {
	g.regMu.Lock()
	defer g.regMu.Unlock()
	g.replayLocked(ctx)
}

// replayLocked registers every live sandbox with the proxy as it is now,
// with its policy now; regMu is held. A proxy that still knows them (the
// caller was wrong that it restarted) says so, and that is fine.
func (g *Gateway) replayLocked(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	h, err := g.control().Health(hctx)
	cancel()
	if err != nil || h.Instance == g.instance {
		return
	}
	failed := 0
	for id, reg := range g.regs {
		err := g.control().Register(ctx, id, reg.IP, reg.Network, reg.Secrets)
		var se *statusError
		if errors.As(err, &se) && se.code == http.StatusConflict {
			continue // registered already: by an earlier replay that failed for another
		}
		if err != nil {
			failed++
			g.cfg.Logger.Warn("egress: registering a sandbox again", "sandbox", shortID(id), "error", err)
		}
	}
	if failed == 0 {
		g.instance = h.Instance
	}
	g.cfg.Logger.Warn("egress proxy restarted: its sandboxes registered again; their egress before it is not accounted",
		"sandboxes", len(g.regs), "failed", failed)
}
