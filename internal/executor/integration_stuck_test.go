package executor

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// removeFaults is the real engine, at the dockerAPI seam, with its remove
// call switched to answer what Docker answers for a container stuck in its
// teardown ("Could not kill running container ..., cannot remove -
// Container ... is not running", a 409) while the fault is on.
type removeFaults struct {
	dockerAPI
	mu      sync.Mutex
	failing bool
	refused int // removals answered with the error
}

func (r *removeFaults) fail(on bool) {
	r.mu.Lock()
	r.failing = on
	r.mu.Unlock()
}

func (r *removeFaults) refusals() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

func (r *removeFaults) ContainerRemove(ctx context.Context, id string, o client.ContainerRemoveOptions) (client.ContainerRemoveResult, error) {
	r.mu.Lock()
	if r.failing {
		r.refused++
		r.mu.Unlock()
		return client.ContainerRemoveResult{}, fmt.Errorf("%w: Could not kill running container %s, cannot remove - Container %s is not running",
			cerrdefs.ErrConflict, id, id)
	}
	r.mu.Unlock()
	return r.dockerAPI.ContainerRemove(ctx, id, o)
}

// A sandbox whose removal fails stays on the engine, holding its uid; the
// executor retries it in the background while it runs (before, it logged
// "Reap will retry at the next start", freed the uid and forgot it), counts
// it in Unremovable meanwhile, and releases the uid once it is gone.
func TestIntegrationStuckRemovalRetried(t *testing.T) {
	cli := requireDocker(t)
	workerID := "test-stuck-" + randHex(3)
	faults := &removeFaults{dockerAPI: cli}
	tune := defaultTuning
	tune.stuck = stuckTuning{first: 200 * time.Millisecond, max: time.Second}
	logs := &testutil.Buffer{}
	e, err := newTuned(Config{WorkerID: workerID, Logger: slog.New(slog.NewTextHandler(logs, nil))}, faults, tune)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		faults.fail(false)
		e.Close()
		if r, err := New(Config{Client: cli, WorkerID: workerID}); err == nil { // whatever the outcome
			_, _ = r.Reap(context.Background())
			r.Close()
		}
		if t.Failed() {
			t.Logf("executor logs:\n%s", logs)
		}
	})

	// A first job reads the image's users while the engine still removes:
	// the container they are read from is not the one under test.
	want(t, run(t, e, job("print(1)")), jobs.StatusSucceeded)
	e.removing.Wait()
	faults.fail(true)
	res := run(t, e, job("print(1)"))
	want(t, res, jobs.StatusSucceeded)
	e.removing.Wait() // the removal behind the job
	if left := listOf(t, cli, workerID); len(left) != 1 {
		t.Fatalf("containers of the worker after a failed removal: %v, want the one", left)
	}
	if n := e.Unremovable(); n != 1 {
		t.Errorf("Unremovable = %d after a failed removal, want 1", n)
	}
	if held := heldUIDs(e); held != 1 {
		t.Errorf("uids claimed = %d while the container is there, want 1 (its name holds the uid on the engine)", held)
	}
	// Retried while the executor runs, not only at the next start.
	testutil.Eventually(t, 30*time.Second, "the removal retried in the background", func() bool { return faults.refusals() >= 3 })
	if n := e.Unremovable(); n != 1 {
		t.Errorf("Unremovable = %d while the engine still refuses, want 1", n)
	}

	faults.fail(false) // the engine settles, as it did for `docker rm -f` by hand
	testutil.Eventually(t, 30*time.Second, "the stuck container removed", func() bool { return len(listOf(t, cli, workerID)) == 0 })
	testutil.Eventually(t, 10*time.Second, "Unremovable back to 0", func() bool { return e.Unremovable() == 0 })
	if held := heldUIDs(e); held != 0 {
		t.Errorf("uids claimed = %d after the container went, want 0", held)
	}
}

func heldUIDs(e *Executor) int {
	e.uids.mu.Lock()
	defer e.uids.mu.Unlock()
	return len(e.uids.held)
}
