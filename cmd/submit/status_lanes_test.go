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
