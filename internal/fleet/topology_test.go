package fleet_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
)

func TestTopologyIdempotent(t *testing.T) {
	t.Parallel()
	topo := fleet.Topology{MaxMsgs: 10, DuplicateWindow: time.Minute}
	_, js := natstest.Connect(t, natstest.Server(t).ClientURL())
	for range 2 {
		if _, err := topo.Ensure(t.Context(), js); err != nil {
			t.Fatal(err)
		}
		if _, err := topo.EnsureConsumer(t.Context(), js, "default"); err != nil {
			t.Fatal(err)
		}
	}
	info, err := js.Stream(t.Context(), fleet.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.CachedInfo().Config
	if cfg.Retention != jetstream.WorkQueuePolicy || cfg.Discard != jetstream.DiscardNew || cfg.MaxMsgs != 10 ||
		cfg.Duplicates != time.Minute || cfg.Storage != jetstream.FileStorage || cfg.Subjects[0] != "jobs.>" ||
		cfg.MaxMsgsPerSubject != 1 || !cfg.DiscardNewPerSubject {
		t.Errorf("stream config: %+v", cfg)
	}
	cons, err := js.Consumer(t.Context(), fleet.StreamName, "workers-default")
	if err != nil {
		t.Fatal(err)
	}
	cc := cons.CachedInfo().Config
	if cc.AckPolicy != jetstream.AckExplicitPolicy || cc.AckWait != 30*time.Second || cc.MaxDeliver != 5 || cc.FilterSubject != "jobs.default.>" {
		t.Errorf("consumer config: %+v", cc)
	}
	// A client with other settings does not override the fleet's.
	if _, err := (fleet.Topology{MaxMsgs: 99}).Open(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	s, _ := js.Stream(t.Context(), fleet.StreamName)
	if got := s.CachedInfo().Config.MaxMsgs; got != 10 {
		t.Errorf("Open changed MaxMsgs to %d", got)
	}
}

func TestParseSubject(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, queue, id string
		ok            bool
	}{
		{"jobs.default.abc", "default", "abc", true},
		{"jobs.q-1.x_y", "q-1", "x_y", true},
		{"jobs.default", "", "", false},
		{"jobs.default.a.b", "default", "a.b", true}, // tenant a's job b
		{"jobs.default.a.b.c", "", "", false},
		{"jobs.default.a.", "", "", false},
		{"jobs.default..b", "", "", false},
		{"other.default.a", "", "", false},
		{"jobs..a", "", "", false},
	}
	for _, tc := range tests {
		q, id, err := fleet.ParseSubject(tc.in)
		if (err == nil) != tc.ok || q != tc.queue || id != tc.id {
			t.Errorf("ParseSubject(%q) = %q, %q, %v", tc.in, q, id, err)
		}
		if err != nil && !errors.Is(err, fleet.ErrBadSubject) {
			t.Errorf("ParseSubject(%q): %v does not wrap ErrBadSubject", tc.in, err)
		}
	}
	if got := fleet.Subject("default", "x"); got != "jobs.default.x" {
		t.Errorf("Subject = %q", got)
	}
}

func TestTopologyValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		topo  fleet.Topology
		field string
	}{
		{fleet.Topology{Replicas: 7}, "Replicas"},
		{fleet.Topology{AckWait: time.Millisecond}, "AckWait"},
		{fleet.Topology{MaxDeliver: -1}, "MaxDeliver"},
		{fleet.Topology{ResultTTL: -time.Hour}, "ResultTTL"},
		{fleet.Topology{CancelWait: -1}, "CancelWait"},
	}
	for _, tc := range tests {
		err := tc.topo.Validate()
		if !errors.Is(err, fleet.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: %v, want an error naming %s", tc.topo, err, tc.field)
		}
	}
	if err := (fleet.Topology{}).Validate(); err != nil {
		t.Errorf("zero Topology: %v", err)
	}
}
