// Package workertest runs a internal/worker Worker for the length of a test, and
// gives tests that need real sandboxes a internal/executor Executor.
package workertest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/worker"
)

// Start creates a worker on js and exec and runs it until the test ends,
// when it is drained and its Run error reported. Zero fields of cfg get
// test-friendly values: a 100 ms FetchWait and a silent logger.
func Start(t testing.TB, js jetstream.JetStream, exec worker.Executor, cfg worker.Config) *worker.Worker {
	t.Helper()
	if cfg.FetchWait == 0 {
		cfg.FetchWait = 100 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w, err := worker.New(js, exec, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop, drain := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(stop, context.Background()) }()
	t.Cleanup(func() {
		drain()
		if err := <-done; err != nil {
			t.Errorf("worker %s: %v", cfg.ID, err)
		}
	})
	return w
}

// Sandbox returns a real executor for cfg, closed when the test ends, once
// Docker and the sandbox image answer its Check; otherwise the test is
// skipped, or failed under SANDFLEET_REQUIRE_DOCKER=1 (testutil.NeedDocker).
// A nil cfg.Logger is a silent one.
func Sandbox(t testing.TB, cfg executor.Config) *executor.Executor {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var e *executor.Executor
	testutil.NeedDocker(t, func(ctx context.Context) error {
		var err error
		if e, err = executor.New(cfg); err != nil {
			return err
		}
		t.Cleanup(func() { e.Close() })
		return e.Check(ctx)
	})
	return e
}
