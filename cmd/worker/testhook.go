//go:build sandfleet_testhooks

package main

import (
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/worker"
)

// A test hook, compiled in only with the build tag sandfleet_testhooks:
// the tests of this package build the binary with it; make build and the
// fleet images do not, and there testhook_off.go stands in. With
// SANDFLEET_FAKE_EXECUTOR=1 a binary built with the tag runs jobs on
// internal/testutil/fakeexec (a tiny script language, no Docker) instead of
// internal/executor. The fault tests and the soak test use it to run the real
// binary, signals, reconnects and crashes included, at a speed that real
// containers do not allow. With SANDFLEET_FAKE_EXECUTOR_LOG=FILE it appends
// the ID of every job it starts to FILE, one per line, so that a test can
// count executions across worker processes. No job runs in a sandbox then,
// which is why the released build cannot be switched to it.
const (
	envFakeExecutor    = "SANDFLEET_FAKE_EXECUTOR"
	envFakeExecutorLog = "SANDFLEET_FAKE_EXECUTOR_LOG"
)

// fakeExecutorFromEnv returns the fake when the hook is on, else nil.
func fakeExecutorFromEnv(log *slog.Logger) (worker.Executor, func() error, error) {
	if os.Getenv(envFakeExecutor) != "1" {
		return nil, nil, nil
	}
	log.Warn("TEST HOOK " + envFakeExecutor + "=1: jobs run on a fake executor, not in sandboxes")
	exec := &fakeexec.Executor{}
	closeFn := func() error { return nil }
	if path := os.Getenv(envFakeExecutorLog); path != "" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", envFakeExecutorLog, err)
		}
		var mu sync.Mutex
		exec.OnRun = func(id string) {
			mu.Lock()
			defer mu.Unlock()
			// One write per line with O_APPEND: whole lines even when the
			// process is killed.
			if _, err := f.WriteString(id + "\n"); err != nil {
				log.Error("execution log", "err", err)
			}
		}
		closeFn = f.Close
	}
	return exec, closeFn, nil
}
