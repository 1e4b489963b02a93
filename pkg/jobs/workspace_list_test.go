package jobs_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// Listing workspaces while their heads move (as a worker's step does when
// it takes and releases a head) lists every one of them each time: the
// list reads which heads exist from the stream's state, not from a watch
// whose end of initial values a concurrent write can bring early.
func TestWorkspacesWhileHeadsMove(t *testing.T) {
	t.Parallel()
	client, js := setup(t, jobs.Topology{})
	ws, err := jobs.Topology{}.EnsureWorkspaces(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"a", "b", "c"}
	for _, n := range names {
		data, _ := json.Marshal(jobs.WorkspaceHead{Name: n})
		if _, err := ws.Heads.Put(t.Context(), n, data); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Go(func() {
			for rev := int64(1); ; rev++ {
				select {
				case <-stop:
					return
				default:
				}
				data, _ := json.Marshal(jobs.WorkspaceHead{Name: n, Revision: rev})
				if _, err := ws.Heads.Put(t.Context(), n, data); err != nil {
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
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		list, err := client.Workspaces(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != len(names) {
			t.Fatalf("list %d while the heads move: %d workspaces, want %d", i, len(list), len(names))
		}
	}
}

// The fleet's status lists every worker while their heartbeats come in
// (each worker writes its own every few seconds): which workers there
// are comes from the stream's state, as for workspaces.
func TestStatusWhileHeartbeats(t *testing.T) {
	t.Parallel()
	client, _ := setup(t, jobs.Topology{})
	ids := []string{"w1", "w2", "w3"}
	beat := func(id string) error {
		data, _ := json.Marshal(jobs.WorkerStatus{ID: id, Slots: 1})
		_, err := client.Stores().Workers.Put(t.Context(), id, data)
		return err
	}
	for _, id := range ids {
		if err := beat(id); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := beat(id); err != nil {
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
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		st, err := client.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Workers) != len(ids) {
			t.Fatalf("status %d while heartbeats come in: %d workers, want %d", i, len(st.Workers), len(ids))
		}
	}
}
