package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/internal/egress"
	"github.com/sandfleet/sandfleet/internal/egressnet"
	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// executorConfig builds the executor's configuration from --config and the
// cap flags (flags win).
func executorConfig(o *options) (executor.Config, error) {
	var fc fileConfig
	if o.configFile != "" {
		data, err := os.ReadFile(o.configFile)
		if err != nil {
			return executor.Config{}, fmt.Errorf("--config: %w", err)
		}
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&fc); err != nil {
			return executor.Config{}, cmdline.Usagef("--config %s: %w", o.configFile, err)
		}
	}
	cfg := executor.Config{
		Presets:  fc.Presets,
		Defaults: fc.Defaults,
		Runtime:  fc.Runtime,
		WorkerID: o.id,
		Pool:     o.pool,
		PoolMax:  o.poolMax,
		UIDs:     o.uids,
	}
	if o.runtime != "" {
		cfg.Runtime = o.runtime
	}
	cfg.NetworkRuntime = o.networkRuntime
	if cfg.NetworkRuntime == "" && cfg.Runtime == "runsc" {
		cfg.NetworkRuntime = "runsc-net" // runsc itself is registered with no network at all
	}
	// The cap flags win over the file's caps, field by field.
	cfg.Caps = limits.Caps(o.caps.Fill(fc.Caps))
	allow, err := limits.ParseRules(o.egressAllow)
	if err != nil {
		return executor.Config{}, cmdline.Usagef("--egress-allow: %w", err)
	}
	// The flags add to the file's caps.network.
	nw := limits.Network{Open: o.allowNetwork, Allow: allow}
	if fc.Caps.Network != nil {
		nw.Open = nw.Open || fc.Caps.Network.Open
		nw.Allow = append(nw.Allow, fc.Caps.Network.Allow...)
	}
	if err := apartFromSandboxes(nw.Allow, o.subnets); err != nil {
		return executor.Config{}, err
	}
	if !nw.None() {
		nw.SecretHosts = egressnet.SecretHosts(o.secrets)
		cfg.Caps.Network = &nw
	} else if len(o.secrets) > 0 {
		return executor.Config{}, cmdline.Usagef("--secrets: no job may have a network to use them (--egress-allow or --allow-network)")
	}
	return cfg, nil
}

// apartFromSandboxes refuses an allow rule that overlaps the sandboxes'
// own networks: the proxy never connects there whatever the rules, so
// such a rule could only mislead (an operator's mirror range that holds
// the sandboxes would otherwise open one tenant's sandbox to another).
func apartFromSandboxes(allow []limits.Rule, subnets netip.Prefix) error {
	for _, r := range allow {
		if r.Host == "" && r.Prefix.Overlaps(subnets) {
			return cmdline.Usagef("--egress-allow %s overlaps --egress-subnets %s, the sandboxes' own networks, which no rule opens: narrow the rule or move --egress-subnets", r, subnets)
		}
	}
	return nil
}

// startEgress starts the egress of a worker whose jobs may have a
// network: its proxy and the sandboxes' networks, named after the worker.
func startEgress(ctx context.Context, o *options, log *slog.Logger) (*egressnet.Networks, error) {
	hosts, err := egress.ParseHosts(o.egressHosts)
	if err != nil {
		return nil, cmdline.Usagef("--egress-hosts: %w", err)
	}
	for name, addrs := range hosts {
		for _, a := range addrs {
			if o.subnets.Contains(a) {
				return nil, cmdline.Usagef("--egress-hosts %s=%s is within --egress-subnets %s: the sandboxes' own addresses are never reachable through the proxy", name, a, o.subnets)
			}
		}
	}
	var upstream []byte
	if o.egressUpstreamCA != "" {
		if upstream, err = os.ReadFile(o.egressUpstreamCA); err != nil {
			return nil, cmdline.Usagef("--egress-upstream-ca: %w", err)
		}
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("egress: docker client: %w", err)
	}
	if err := waitForEngine(ctx, cli, o.engineWait, log); err != nil {
		cli.Close()
		return nil, err
	}
	name := "sandfleet-egress-" + strings.NewReplacer("/", "-", "=", "-").Replace(o.id)
	return egressnet.Start(ctx, egressnet.Config{
		Client: cli, Name: name, Image: o.egressImage, Outside: o.egressNetwork, Hosts: hosts, Subnets: o.subnets, Logger: log,
		Secrets: o.secrets, UpstreamCA: upstream,
	})
}

// waitForEngine pings the Docker engine with back-off until it answers,
// for at most wait (--engine-wait): the egress proxy is a container of
// that engine, and an engine started beside the worker (a pod's sidecar,
// a host's dockerd restarting) may answer a little after the worker
// starts. The executor needs no such wait: it starts without the engine
// and the worker stays not ready until it answers.
func waitForEngine(ctx context.Context, cli *client.Client, wait time.Duration, log *slog.Logger) error {
	deadline := time.Now().Add(wait)
	delay := 100 * time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := cli.Ping(pctx, client.PingOptions{})
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().Add(delay).After(deadline) {
			return fmt.Errorf("egress: the Docker engine did not answer within --engine-wait %s: %w", wait, err)
		}
		log.Warn("waiting for the Docker engine before starting the egress proxy", "err", err, "retry_in", delay)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// newExecutor is the one place that wires internal/executor in.
func newExecutor(cfg executor.Config) (interface {
	worker.Executor
	Close() error
}, error) {
	e, err := executor.New(cfg)
	if err != nil {
		return nil, cmdline.Usagef("%w", err)
	}
	return executor.StartService(e), nil
}

var _ worker.Pinger = (*executor.Service)(nil)
