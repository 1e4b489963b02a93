package main

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
)

// stuckFake is the fake executor with internal/executor's count of containers it
// fails to remove, set by the test.
type stuckFake struct {
	*fakeexec.Executor
	n *atomic.Int64
}

func (f stuckFake) Unremovable() int { return int(f.n.Load()) }

// The containers the executor cannot remove are a gauge, and from
// unremovableMax on /readyz says the worker is not ready, and why; once
// the retries removed them it is ready again.
func TestUnremovableReadiness(t *testing.T) {
	t.Parallel()
	addr := testutil.FreeAddr(t)
	var n atomic.Int64
	s := startServe(t, []string{"--embedded", "--listen", "127.0.0.1:-1", "--data-dir", t.TempDir(),
		"--id", "u1", "--metrics", addr}, stuckFake{&fakeexec.Executor{}, &n})
	defer s.Stop(t)
	ready := func() bool { c, _ := httpGet("http://" + addr + "/readyz"); return c == 200 }
	testutil.Eventually(t, 20*time.Second, "ready", ready)

	n.Store(unremovableMax - 1)
	if m := scrape(t, addr); m["sandfleet_sandboxes_unremovable"] != unremovableMax-1 || m["sandfleet_ready"] != 1 {
		t.Errorf("below the threshold: unremovable %v ready %v, want %d and 1", m["sandfleet_sandboxes_unremovable"], m["sandfleet_ready"], unremovableMax-1)
	}
	if !ready() {
		t.Error("/readyz not ready below the threshold")
	}
	n.Store(unremovableMax)
	if c, body := httpGet("http://" + addr + "/readyz"); c != 503 || !strings.Contains(body, "cannot be removed") {
		t.Errorf("/readyz = %d %q at the threshold, want 503 saying why", c, body)
	}
	if m := scrape(t, addr); m["sandfleet_sandboxes_unremovable"] != unremovableMax || m["sandfleet_ready"] != 0 {
		t.Errorf("at the threshold: unremovable %v ready %v, want %d and 0", m["sandfleet_sandboxes_unremovable"], m["sandfleet_ready"], unremovableMax)
	}
	n.Store(0)
	if !ready() {
		t.Error("/readyz not ready once the containers went")
	}
}
