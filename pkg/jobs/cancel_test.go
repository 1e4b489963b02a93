package jobs_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// restrictedServer starts an in-process server with two users: "admin"
// may do anything, "submitter" may not write RESULTS (as in
// deploy/compose/nats.conf). It returns a JetStream context per user.
func restrictedServer(t *testing.T) (admin, submitter jetstream.JetStream) {
	t.Helper()
	s := natstest.ServerWith(t, &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		Users: []*server.User{
			{Username: "admin", Password: "a"},
			{Username: "submitter", Password: "s", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$KV.RESULTS.>"}},
			}},
		},
	})
	js := func(user, pass string) jetstream.JetStream {
		_, js := natstest.Connect(t, s.ClientURL(), nats.UserInfo(user, pass),
			nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})) // the refusal is expected
		return js
	}
	return js("admin", "a"), js("submitter", "s")
}

// A client that may not write RESULTS cancels a queued job with no worker
// up: the request is recorded, its own write is refused, and Cancel says
// so with ErrCancelPending within twice CancelWait instead of failing.
func TestCancelPendingWhenResultsWriteRefused(t *testing.T) {
	t.Parallel()
	adminJS, subJS := restrictedServer(t)
	cfg := jobs.Config{CancelWait: 300 * time.Millisecond}
	admin, err := jobs.NewClient(t.Context(), adminJS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := jobs.NewClient(t.Context(), subJS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Submit(t.Context(), &jobs.Job{ID: "q1", Image: "python", Code: "x"}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	res, err := sub.Cancel(t.Context(), "q1")
	if !errors.Is(err, jobs.ErrCancelPending) || res != nil {
		t.Fatalf("Cancel = %+v, %v; want ErrCancelPending", res, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Cancel took %s", d)
	}
	if _, err := natstest.Stores(t, adminJS).Cancels.Get(t.Context(), "q1"); err != nil {
		t.Errorf("cancel request not recorded: %v", err)
	}
	if _, err := admin.Get(t.Context(), "q1"); !errors.Is(err, jobs.ErrNotFound) {
		t.Errorf("a result was stored despite the refusal: %v", err)
	}
	if q, err := admin.Pending(t.Context(), "q1"); err != nil || !q {
		t.Errorf("job no longer queued: %v %v", q, err)
	}

	// A client allowed to write RESULTS finishes it itself.
	res, err = admin.Cancel(t.Context(), "q1")
	if err != nil || res.Status != jobs.StatusCanceled || res.Error != fleet.CancelReason {
		t.Fatalf("admin Cancel = %+v, %v", res, err)
	}
	// The submitter now reads the canceled result as the job's end.
	if _, err := sub.Cancel(t.Context(), "q1"); !errors.Is(err, jobs.ErrFinished) {
		t.Errorf("second cancel: %v, want ErrFinished", err)
	}
}
