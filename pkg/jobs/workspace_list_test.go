package jobs_test

import (
	"encoding/json"
	"errors"
	"io"
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

// A head with an owner, whatever its name, is its owner's alone: a client
// (acting for its whole tenant or the fleet) finds no such workspace, does
// not list it, can neither read its snapshot nor remove it.
func TestOwnedHeadIsNoClients(t *testing.T) {
	t.Parallel()
	client, js := setup(t, fleet.Topology{})
	ws, err := fleet.Topology{}.EnsureWorkspaces(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	for name, owner := range map[string]string{"owned": "tok-1", "open": ""} {
		data, _ := json.Marshal(jobs.WorkspaceHead{Name: name, Revision: 1, Owner: owner})
		if _, err := ws.Heads.Put(t.Context(), name, data); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.Workspace(t.Context(), "owned"); !errors.Is(err, jobs.ErrNoWorkspace) {
		t.Errorf("Workspace of an owned head: %v, want ErrNoWorkspace", err)
	}
	if _, err := client.DeleteWorkspace(t.Context(), "owned"); !errors.Is(err, jobs.ErrNoWorkspace) {
		t.Errorf("DeleteWorkspace of an owned head: %v, want ErrNoWorkspace", err)
	}
	if _, err := client.WriteSnapshot(t.Context(), jobs.WorkspaceRef{Name: "owned"}, io.Discard); !errors.Is(err, jobs.ErrNoWorkspace) {
		t.Errorf("WriteSnapshot of an owned head: %v, want ErrNoWorkspace", err)
	}
	list, err := client.Workspaces(t.Context())
	if err != nil || len(list) != 1 || list[0].Name != "open" {
		t.Errorf("Workspaces: %v %+v, want the open one alone", err, list)
	}
	if e, err := ws.Heads.Get(t.Context(), "owned"); err != nil || e == nil {
		t.Errorf("the owned head after the client's calls: %v, want it kept", err)
	}
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
