package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/retry"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
)

// The requests the watch has read answer a job's check, except one older
// than the bucket's TTL: the server has expired it without telling the
// watch, and a job ID used again after that must run. Past maxCancels
// the worker keeps none (and every job reads CANCELS).
func TestCancelRequestedFromTheWatch(t *testing.T) {
	w := &Worker{cfg: Config{Topology: fleet.Topology{ResultTTL: time.Hour}}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w.cancels = map[string]time.Time{"now": time.Now(), "old": time.Now().Add(-2 * time.Hour)}
	if !w.cancelRequested("now", w.log) {
		t.Error("a request stored a moment ago not found")
	}
	if w.cancelRequested("old", w.log) {
		t.Error("a request older than the bucket's TTL found")
	}
	if w.cancelRequested("none", w.log) {
		t.Error("a job without a request found")
	}
	for i := range maxCancels {
		w.cancelRunning(strconv.Itoa(i), time.Now())
	}
	w.mu.Lock()
	n := len(w.cancels)
	w.mu.Unlock()
	if n != 0 {
		t.Errorf("%d requests kept past the bound of %d", n, maxCancels)
	}
}

// failingWatches is CANCELS whose first watches fail to start, as on a
// broker that is slow while the worker starts.
type failingWatches struct {
	jetstream.KeyValue
	left atomic.Int32
}

func (f *failingWatches) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	if f.left.Add(-1) >= 0 {
		return nil, errors.New("nats: timeout")
	}
	return f.KeyValue.WatchAll(ctx, opts...)
}

// A watch of CANCELS that fails to start is started again: a request for
// a job running here still cancels it, and once the watch has read the
// bucket a job is checked against what it read.
func TestCancelWatchStartsAgain(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	stores, err := fleet.Topology{}.Ensure(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	cancels := &failingWatches{KeyValue: stores.Cancels}
	cancels.left.Store(2)
	stores.Cancels = cancels
	w := &Worker{stores: stores, running: map[*run]struct{}{}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		cfg: Config{Backoff: retry.Policy{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}.Func()}}
	jobCtx, cancelJob := context.WithCancelCause(context.Background())
	defer cancelJob(nil)
	w.running[&run{id: "x", cancel: cancelJob}] = struct{}{}

	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); w.watchCancels(ctx) }()
	defer func() { stop(); <-done }()
	if _, err := stores.Cancels.Put(t.Context(), "x", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-jobCtx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the running job was not canceled: the watch did not start again")
	}
	if left := cancels.left.Load(); left > -1 {
		t.Fatalf("watches tried: %d, want 3", 2-left)
	}
	testutil.Eventually(t, 10*time.Second, "the watch's requests in use", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		_, ok := w.cancels["x"]
		return ok
	})
}

// The requests waiting for a lookup are taken a tenant at a time, so that
// one tenant's backlog delays another's request by a lookup per round,
// and a tenant's backlog is bounded: what it leaves out waits for the
// job's delivery, which finds the request in CANCELS.
func TestQueuedCancelsTakeTenantsInTurn(t *testing.T) {
	q := newQueuedCancels()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := range maxQueuedPerTenant + 10 {
		q.add("team-b.f"+strconv.Itoa(i), log)
	}
	q.add("team-a.mine", log)
	q.add("plain", log)
	q.add("not an id", log)
	var got []string
	for range 6 {
		id, ok := q.next()
		if !ok {
			t.Fatal("the queue ran dry")
		}
		got = append(got, id)
	}
	want := []string{"team-b.f0", "team-a.mine", "plain", "team-b.f1", "team-b.f2", "team-b.f3"}
	if !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	n := len(got)
	for {
		if _, ok := q.next(); !ok {
			break
		}
		n++
	}
	if want := maxQueuedPerTenant + 2; n != want {
		t.Errorf("%d requests taken, want %d (team-b's bounded to %d)", n, want, maxQueuedPerTenant)
	}
}
