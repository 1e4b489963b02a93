package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// A worker with priority lanes shows them in the status table, name:weight,
// the heaviest first; a worker of one queue shows its name.
func TestStatusShowsLanes(t *testing.T) {
	t.Parallel()
	now := time.Now()
	var b strings.Builder
	(&statusCommand{}).table(&b, &jobs.FleetStatus{Workers: []jobs.WorkerStatus{
		{ID: "laned", Queue: "interactive", Queues: []string{"interactive:10", "batch:1"}, Slots: 4, Ready: true, StartedAt: now, LastSeen: now},
		{ID: "plain", Queue: "default", Queues: []string{"default:1"}, Slots: 2, Ready: true, StartedAt: now, LastSeen: now},
	}})
	for _, want := range []string{"laned   interactive:10,batch:1  0/4", "plain   default                 0/2"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status table lacks %q:\n%s", want, b.String())
		}
	}
}

// A worker that is not ready says why, whole, under the table: the
// engine's error is what an operator needs ("runtime runsc: cannot start
// sandboxes: ..." is longer than any column).
func TestStatusShowsWhyNotReady(t *testing.T) {
	t.Parallel()
	now := time.Now()
	why := "runtime runsc: cannot start sandboxes: OCI runtime create failed: cannot run with network enabled in root network namespace"
	var b strings.Builder
	(&statusCommand{}).table(&b, &jobs.FleetStatus{Workers: []jobs.WorkerStatus{
		{ID: "broken", Queue: "default", Slots: 2, Ready: false, LastError: why, StartedAt: now, LastSeen: now},
		{ID: "fine", Queue: "default", Slots: 2, Ready: true, StartedAt: now, LastSeen: now},
	}})
	if !strings.Contains(b.String(), "broken is not ready: "+why+"\n") || strings.Contains(b.String(), "fine is not ready") {
		t.Errorf("status table:\n%s", b.String())
	}
}
