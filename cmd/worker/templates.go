package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/retry"
	"github.com/sandfleet/sandfleet/pkg/templates"
)

// templateSetter is an executor that serves the fleet's templates
// (internal/executor).
type templateSetter interface {
	SetTemplates(map[string]*templates.Template)
}

// serveTemplates keeps ts's templates those of the registry until ctx
// ends: a registration, a new version or a removal reaches the worker
// without a restart. A registry it cannot reach (credentials that may not
// read it) is retried; jobs of the presets run meanwhile.
func serveTemplates(ctx context.Context, js jetstream.JetStream, replicas int, ts templateSetter, log *slog.Logger) {
	b := retry.Policy{Initial: time.Second, Max: 30 * time.Second}.New()
	for ctx.Err() == nil {
		reg, err := templates.Open(ctx, js, replicas)
		if err == nil {
			err = reg.Watch(ctx, func(m map[string]*templates.Template) {
				ts.SetTemplates(m)
				log.Info("templates", "count", len(m))
			})
		}
		if ctx.Err() != nil {
			return
		}
		log.Warn("the template registry is out of reach; retrying", "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(b.NextBackOff()):
		}
	}
}
