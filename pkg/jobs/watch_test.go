package jobs_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

func TestWatchResults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ids  []string
		// of the results stored after the watch opened, a, b and c, in
		// order: a result not watched for, or stored before, would come first
		want []string
	}{
		{"every job", nil, []string{"a", "b", "c"}},
		{"a set of IDs", []string{"c", "a"}, []string{"a", "c"}},
		{"one ID", []string{"b"}, []string{"b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, js := setup(t, fleet.Topology{})
			store := func(id string) {
				t.Helper()
				res := &jobs.Result{ID: id, Status: jobs.StatusSucceeded}
				if _, _, err := records.StoreResult(t.Context(), natstest.Stores(t, js).Results, res, 0); err != nil {
					t.Fatal(err)
				}
			}
			store("before") // stored before the watch: Get's to find, not the watch's
			ids := slices.Clone(tc.ids)
			rw, err := c.WatchResults(t.Context(), ids...)
			if err != nil {
				t.Fatal(err)
			}
			defer rw.Stop()
			if !slices.Equal(ids, tc.ids) {
				t.Fatalf("WatchResults changed its ids to %q", ids)
			}
			for _, id := range []string{"a", "b", "c"} {
				store(id)
			}
			for _, want := range tc.want {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				got, err := rw.Next(ctx)
				cancel()
				if err != nil {
					t.Fatalf("Next, waiting for %s: %v", want, err)
				}
				res, err := got.Decode()
				if err != nil {
					t.Fatal(err)
				}
				if got.ID != want || res.ID != want || res.Status != jobs.StatusSucceeded {
					t.Fatalf("Next = %s (%+v), want %s", got.ID, res, want)
				}
			}
		})
	}
}

func TestWatchResultsRefuses(t *testing.T) {
	t.Parallel()
	c, js := setup(t, fleet.Topology{})
	if _, err := c.WatchResults(t.Context(), "ok", "not ok"); !errors.Is(err, jobs.ErrInvalidJob) {
		t.Errorf("an invalid ID: %v, want ErrInvalidJob", err)
	}
	tc, err := jobs.NewTenantClient(js, "acme", jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.WatchResults(t.Context(), "other.x"); !errors.Is(err, jobs.ErrInvalidJob) {
		t.Errorf("a tenant's client watching another tenant's ID: %v, want ErrInvalidJob", err)
	}
}

// A tenant's watch of its results (a batch's) delivers its own, of the
// IDs it was opened for, and never another tenant's or the operator's.
func TestTenantWatchResults(t *testing.T) {
	t.Parallel()
	_, js := setup(t, fleet.Topology{})
	tc, err := jobs.NewTenantClient(js, "acme", jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	all, err := tc.WatchResults(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer all.Stop()
	one, err := tc.WatchResults(t.Context(), "acme.b")
	if err != nil {
		t.Fatal(err)
	}
	defer one.Stop()
	for _, id := range []string{"other.a", "plain", "acme.a", "acme.b"} {
		if _, _, err := records.StoreResult(t.Context(), natstest.Stores(t, js).Results, &jobs.Result{ID: id, Status: jobs.StatusSucceeded}, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		w    *jobs.ResultsWatch
		want []string
	}{{all, []string{"acme.a", "acme.b"}}, {one, []string{"acme.b"}}} {
		for _, want := range tc.want {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			got, err := tc.w.Next(ctx)
			cancel()
			if err != nil || got.ID != want {
				t.Fatalf("Next = %q, %v; want %s", got.ID, err, want)
			}
		}
	}
}

func TestWatchResultsClosed(t *testing.T) {
	t.Parallel()
	c, _ := setup(t, fleet.Topology{})
	rw, err := c.WatchResults(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := rw.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := rw.Next(ctx); !errors.Is(err, jobs.ErrWatchClosed) {
		t.Fatalf("Next after Stop: %v, want ErrWatchClosed", err)
	}
}

// A result watch's subscription is only a wake-up: a server that refuses
// it (permissions written before it) still lets the wait end, by the
// reread of the stored value every few seconds.
func TestWatchWithoutItsSubscription(t *testing.T) {
	t.Parallel()
	s := natstest.ServerWith(t, &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		Users: []*server.User{
			{Username: "admin", Password: "a"},
			{Username: "waiter", Password: "w", Permissions: &server.Permissions{
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
			}},
		},
	})
	_, adminJS := natstest.Connect(t, s.ClientURL(), nats.UserInfo("admin", "a"))
	_, waiterJS := natstest.Connect(t, s.ClientURL(), nats.UserInfo("waiter", "w"),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})) // the refusal is expected
	if _, err := jobs.NewClient(t.Context(), adminJS, jobs.Config{}); err != nil { // creates the topology
		t.Fatal(err)
	}
	waiter, err := jobs.NewClient(t.Context(), waiterJS, jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rw, err := waiter.Watch(t.Context(), "late")
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Stop()
	if _, _, err := records.StoreResult(t.Context(), natstest.Stores(t, adminJS).Results, &jobs.Result{ID: "late", Status: jobs.StatusSucceeded}, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	if res, err := rw.Next(ctx); err != nil || res.ID != "late" {
		t.Fatalf("Next = %+v, %v; want the stored result", res, err)
	}
}
