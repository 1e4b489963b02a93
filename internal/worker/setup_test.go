package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// signalHandler is a slog handler that sends each record's message to a
// channel (dropping it when the channel is full).
type signalHandler struct{ msgs chan string }

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.msgs <- r.Message:
	default:
	}
	return nil
}
func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h signalHandler) WithGroup(string) slog.Handler      { return h }

// A worker started before JetStream is available (the server runs, but
// JetStream is not enabled yet, as on a cluster without a meta leader)
// logs each failed attempt to set up the topology, is not ready, and
// serves jobs once JetStream comes up, instead of exiting.
func TestSetupRetriesUntilJetStream(t *testing.T) {
	t.Parallel()
	srv := natstest.ServerWith(t, &server.Options{Host: "127.0.0.1", Port: -1})
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}

	logs := make(chan string, 64)
	exec := &fakeexec.Executor{}
	w, err := worker.New(js, exec, worker.Config{
		ID: "early", Slots: 1, FetchWait: 200 * time.Millisecond, Backoff: fastBackoff,
		Topology: fleet.Topology{AckWait: 2 * time.Second}, Logger: slog.New(signalHandler{logs}),
	})
	if err != nil {
		t.Fatal(err)
	}
	stop, stopNow := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(stop, context.Background()) }()
	defer func() {
		stopNow()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// Two failed attempts: the worker keeps trying rather than exiting.
	for failed := 0; failed < 2; {
		select {
		case m := <-logs:
			if strings.Contains(m, "topology not ready") {
				failed++
			}
		case err := <-done:
			t.Fatalf("Run returned before JetStream was up: %v", err)
		case <-time.After(20 * time.Second):
			t.Fatal("no retry logged")
		}
	}
	if w.Ready() {
		t.Error("ready without a topology")
	}

	if err := srv.EnableJetStream(&server.JetStreamConfig{StoreDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	client, err := jobs.NewClient(waitCtx(t), js, jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.SubmitAndWait(waitCtx(t), &jobs.Job{ID: "after-js", Image: "python", Code: "print up"})
	if err != nil || res.Status != jobs.StatusSucceeded || res.Worker != "early" {
		t.Fatalf("job after JetStream came up: %v %+v", err, res)
	}
	testutil.Eventually(t, 10*time.Second, "worker ready", w.Ready)
}
