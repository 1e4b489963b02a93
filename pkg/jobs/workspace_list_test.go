package jobs_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// whileWriting writes each key in a loop of its own (write must return
// nil) and meanwhile calls list, which returns how many keys it saw,
// until 2 s have passed; every call must see them all.
func whileWriting(t *testing.T, keys []string, write func(key string, n int64) error, list func() (int, error)) {
	t.Helper()
	for _, k := range keys {
		if err := write(k, 0); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			for n := int64(1); ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := write(k, n); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for i, deadline := 0, time.Now().Add(2*time.Second); time.Now().Before(deadline); i++ {
		n, err := list()
		if err != nil {
			t.Fatal(err)
		}
		if n != len(keys) {
			t.Fatalf("list %d while the keys are written: %d of %d", i, n, len(keys))
		}
	}
}

// Listing workspaces while their heads move (as a worker's step does when
// it takes and releases a head) lists every one of them each time: the
// list reads which heads exist from the stream's state, not from a watch
// whose end of initial values a concurrent write can bring early.
func TestWorkspacesWhileHeadsMove(t *testing.T) {
	t.Parallel()
	client, js := setup(t, fleet.Topology{})
	ws, err := fleet.Topology{}.EnsureWorkspaces(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	whileWriting(t, []string{"a", "b", "c"}, func(name string, rev int64) error {
		data, _ := json.Marshal(jobs.WorkspaceHead{Name: name, Revision: rev})
		_, err := ws.Heads.Put(t.Context(), name, data)
		return err
	}, func() (int, error) {
		list, err := client.Workspaces(t.Context())
		return len(list), err
	})
}

// The fleet's status lists every worker while their heartbeats come in
// (each worker writes its own every few seconds): which workers there
// are comes from the stream's state, as for workspaces.
func TestStatusWhileHeartbeats(t *testing.T) {
	t.Parallel()
	client, js := setup(t, fleet.Topology{})
	whileWriting(t, []string{"w1", "w2", "w3"}, func(id string, _ int64) error {
		data, _ := json.Marshal(jobs.WorkerStatus{ID: id, Slots: 1})
		_, err := natstest.Stores(t, js).Workers.Put(t.Context(), id, data)
		return err
	}, func() (int, error) {
		st, err := client.Status(t.Context())
		if err != nil {
			return 0, err
		}
		return len(st.Workers), nil
	})
}
