package main

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/sessionhost"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// sessionStarter is an executor that starts sessions' sandboxes.
type sessionStarter interface {
	StartSession(ctx context.Context, spec executor.SessionSpec) (*executor.Session, error)
	ResolveLimits(tenant, image string, l limits.Limits) (limits.Limits, error)
	HasPreset(tenant, name string) bool
}

// The worker serves sessions when its executor starts them (run.go asks
// at run time): the executor must keep doing so.
var _ sessionStarter = (*executor.Executor)(nil)

// startSession is how the session host starts a sandbox on ss.
func startSession(ss sessionStarter) sessionhost.Starter {
	return func(ctx context.Context, spec sessionhost.StartSpec) (sessionhost.Sandbox, error) {
		return ss.StartSession(ctx, executor.SessionSpec{ID: spec.ID, Image: spec.Image, Tenant: spec.Tenant, Limits: spec.Limits,
			Env: spec.Env, Files: spec.Files, Lifetime: spec.Lifetime, OutputLimit: spec.MaxOutput, Restore: spec.Restore, OnEvent: spec.OnEvent})
	}
}

// sessionWorkspaces opens the workspace stores persistent sessions keep
// their checkpoints in, with the fleet's settings, each once per process.
func sessionWorkspaces(js jetstream.JetStream, topo fleet.Topology) func(context.Context, string) (jetstream.KeyValue, jetstream.ObjectStore, error) {
	var mu sync.Mutex
	var heads jetstream.KeyValue
	snaps := map[string]jetstream.ObjectStore{}
	return func(ctx context.Context, tenant string) (jetstream.KeyValue, jetstream.ObjectStore, error) {
		mu.Lock()
		defer mu.Unlock()
		if heads == nil {
			ws, err := topo.EnsureWorkspaces(ctx, js)
			if err != nil {
				return nil, nil, err
			}
			heads, snaps[""] = ws.Heads, ws.Snapshots
		}
		if s, ok := snaps[tenant]; ok {
			return heads, s, nil
		}
		o, err := topo.EnsureObjects(ctx, js, tenant)
		if err != nil {
			return nil, nil, err
		}
		snaps[tenant] = o.Snapshots
		return heads, o.Snapshots, nil
	}
}
