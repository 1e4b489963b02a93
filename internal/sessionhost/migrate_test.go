package sessionhost_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/sessionhost"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// The records an earlier version kept by ID alone stay readable: a
// worker's start moves an ended one under its owner's keys (listed, read
// by ID), and one running on another worker stays where that worker
// writes it, still read by ID.
func TestLegacyRecordsStayReadable(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	kv, err := sessionhost.EnsureBucket(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	put := func(info sessions.Info) {
		b, _ := json.Marshal(info)
		if _, err := kv.Create(t.Context(), info.ID, b); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC()
	put(sessions.Info{ID: "s-ended", Owner: "alice", Tenant: "acme", Status: sessions.StatusEnded, EndReason: sessions.EndDeleted, CreatedAt: now})
	put(sessions.Info{ID: "s-elsewhere", Owner: "alice", Tenant: "acme", Status: sessions.StatusRunning, Worker: "old", CreatedAt: now})

	h, err := sessionhost.New(t.Context(), js, nil, sessionhost.Config{Worker: "new"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })

	c, err := sessions.NewClient(t.Context(), js, "")
	if err != nil {
		t.Fatal(err)
	}
	alice := c.For("acme", "alice")
	testutil.Eventually(t, 10*time.Second, "the ended record moved", func() bool {
		_, err := kv.Get(t.Context(), "s-ended")
		return errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted)
	})
	list, err := alice.List(t.Context())
	if err != nil || len(list) != 1 || list[0].ID != "s-ended" {
		t.Fatalf("alice's list: %v %+v, want the moved record", err, list)
	}
	for _, id := range []string{"s-ended", "s-elsewhere"} {
		if info, err := alice.Get(t.Context(), id); err != nil || info.ID != id {
			t.Errorf("get %s: %v", id, err)
		}
		if _, err := c.For("acme", "mallory").Get(t.Context(), id); !errors.Is(err, sessionapi.ErrNotFound) {
			t.Errorf("another owner's get of %s: %v, want ErrNotFound", id, err)
		}
	}
}
