package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

func TestParseQueueFlags(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"--queue", "batch:1", "--queue", "interactive:10", "--slots", "4"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []worker.Lane{{Queue: "batch", Weight: 1}, {Queue: "interactive", Weight: 10}}; fmt.Sprint(o.lanes) != fmt.Sprint(want) {
		t.Errorf("lanes %v, want %v", o.lanes, want)
	}
	o, err = parseFlags([]string{"--queue", "a", "--queue", "b", "--queue", "c"})
	if err != nil || o.slots < 3 {
		t.Errorf("three lanes, default slots: %v, %d slots; want at least one per lane", err, o.slots)
	}
	for _, args := range [][]string{
		{"--queue", "a", "--queue", "a:2"},
		{"--queue", "a:x"},
		{"--queue", "a:0", "--queue", "b:-2"},
		{"--queue", "a", "--queue", "b", "--slots", "1"},
	} {
		if _, err := parseFlags(args); !errors.Is(err, cmdline.ErrUsage) {
			t.Errorf("parseFlags(%q) = %v, want a usage error", args, err)
		}
	}
}

// /metrics shows each lane's backlog (and --max-ack-pending reaches each
// lane's consumer): pending, in flight, the oldest
// pending job's age and this worker's busy slots per queue, which only
// `submit status` knew before.
func TestLaneMetrics(t *testing.T) {
	t.Parallel()
	addr := testutil.FreeAddr(t)
	exec := &fakeexec.Executor{}
	s := startServe(t, []string{"--embedded", "--listen", "127.0.0.1:-1", "--data-dir", t.TempDir(),
		"--slots", "2", "--id", "lanes", "--queue", "interactive:10", "--queue", "batch:1", "--max-ack-pending", "77", "--metrics", addr}, exec)
	defer s.Stop(t)
	c := connect(t, s.url)
	_, js := natstest.Connect(t, s.url)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range 3 {
		if _, err := c.Submit(ctx, &jobs.Job{ID: fmt.Sprintf("b%d", i), Queue: "batch", Image: "python", Code: "block"}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "two batch jobs running", func() bool { return exec.Running() == 2 })
	for _, q := range []string{"interactive", "batch"} {
		ci, err := js.Consumer(ctx, fleet.StreamName, fleet.ConsumerName(q))
		if err != nil || ci.CachedInfo().Config.MaxAckPending != 77 {
			t.Errorf("consumer of %s: %v, want MaxAckPending 77 (--max-ack-pending)", q, err)
		}
	}
	var m map[string]float64
	testutil.Eventually(t, 10*time.Second, "the oldest pending job a second old", func() bool {
		m = scrape(t, addr)
		return m[`sandfleet_queue_oldest_pending_age_seconds{queue="batch"}`] >= 1
	})
	want := map[string]float64{
		`sandfleet_queue_pending{queue="batch"}`:                          1,
		`sandfleet_queue_in_flight{queue="batch"}`:                        2,
		`sandfleet_queue_slots_busy{queue="batch"}`:                       2,
		`sandfleet_queue_weight{queue="batch"}`:                           1,
		`sandfleet_queue_pending{queue="interactive"}`:                    0,
		`sandfleet_queue_in_flight{queue="interactive"}`:                  0,
		`sandfleet_queue_slots_busy{queue="interactive"}`:                 0,
		`sandfleet_queue_oldest_pending_age_seconds{queue="interactive"}`: 0,
		`sandfleet_queue_weight{queue="interactive"}`:                     10,
		`sandfleet_queue_stats_up`:                                        1,
		`sandfleet_slots_busy`:                                            2,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	for i := range 3 {
		if _, err := c.Cancel(ctx, fmt.Sprintf("b%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "queue empty", func() bool {
		m = scrape(t, addr)
		return m[`sandfleet_queue_pending{queue="batch"}`] == 0 && m[`sandfleet_queue_in_flight{queue="batch"}`] == 0 &&
			m[`sandfleet_queue_oldest_pending_age_seconds{queue="batch"}`] == 0
	})
}
