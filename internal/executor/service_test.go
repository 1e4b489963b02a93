package executor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/sandfleet/sandfleet/internal/testutil"
)

// The reaper does not hold start-up: while the engine cannot list
// containers it retries in the background, saying so; once it can, it
// removes what a crashed predecessor left and stops. Ping is Check.
func TestServiceReapsRetryingUntilTheEngineLists(t *testing.T) {
	t.Parallel()
	f := newFaultyEngine(t)
	down := errors.New("connection refused")
	f.set(func(f *faultyEngine) {
		f.listErr = down
		f.list = []container.Summary{{ID: "leftoverleft1", Labels: map[string]string{LabelManaged: "true", LabelWorker: "w", LabelInstance: "crashed"}}}
		f.alive["leftoverleft1"] = ""
	})
	e, logs := faultyExecutor(t, f, fastTuning, nil)
	r := StartService(e)
	testutil.Eventually(t, 10*time.Second, "a second list after the first failed", func() bool { return f.count("list") >= 2 })
	if _, left := f.books(); len(left) != 1 {
		t.Errorf("left %v while the engine cannot list, want the leftover", left)
	}
	f.set(func(f *faultyEngine) { f.pingErr = down })
	if err := r.Ping(context.Background()); !errors.Is(err, ErrInfrastructure) {
		t.Errorf("Ping with the engine down = %v, want ErrInfrastructure", err)
	}

	f.set(func(f *faultyEngine) { f.listErr, f.pingErr = nil, nil })
	testutil.Eventually(t, 10*time.Second, "the leftover reaped", func() bool { _, left := f.books(); return len(left) == 0 })
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !strings.Contains(logs.String(), "reap leftover sandboxes; retrying") || !strings.Contains(logs.String(), "reaped leftover sandboxes") {
		t.Errorf("logs:\n%s", logs)
	}
}

// Close stops a reaper that is still retrying, at once, and a Service
// made by hand has none to stop.
func TestReapingCloseStopsTheRetries(t *testing.T) {
	t.Parallel()
	f := newFaultyEngine(t)
	f.set(func(f *faultyEngine) { f.listErr = errors.New("connection refused") })
	e, _ := faultyExecutor(t, f, fastTuning, nil)
	r := StartService(e)
	testutil.Eventually(t, 10*time.Second, "the first list", func() bool { return f.count("list") >= 1 })
	closing := time.Now()
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if took := time.Since(closing); took > 2*time.Second {
		t.Errorf("Close took %s: it waited for the back-off", took)
	}

	byHand := &Service{Executor: e}
	if err := byHand.Close(); err != nil {
		t.Fatalf("Close of a Service that never reaped: %v", err)
	}
}
