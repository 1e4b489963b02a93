//go:build !sandfleet_testhooks

package main

import (
	"log/slog"

	"github.com/sandfleet/sandfleet/internal/worker"
)

// fakeExecutorFromEnv is the released build's stand-in for the test hook of
// testhook.go: there is no fake executor to switch to, whatever the
// environment says, so every job runs in a sandbox.
func fakeExecutorFromEnv(*slog.Logger) (worker.Executor, func() error, error) {
	return nil, nil, nil
}
