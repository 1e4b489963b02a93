package worker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// perRun runs a job whose output differs from one run to the next (a
// timestamp, a seed): run n waits for its release file n, then writes
// out.txt saying "run-n".
type perRun struct {
	*fakeexec.Executor
	dir string
	n   atomic.Int32
}

func (p *perRun) Run(ctx context.Context, job *jobs.Job, opts jobrun.Options) (*jobs.Result, error) {
	n := p.n.Add(1)
	j := *job
	j.Code = fmt.Sprintf("waitfile %s\nwrite out.txt run-%d", filepath.Join(p.dir, fmt.Sprint(n)), n)
	return p.Executor.Run(ctx, &j, opts)
}

// Two live deliveries of a job with outputs (the first's lease ran out
// while it still ran): the first to end stores its result, and the
// second, ending later, must not write over the files that result names.
func TestArtifactsOfTheStoredResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dir := t.TempDir()
	ex := &perRun{Executor: b.exec, dir: dir}
	spy, acks := b.ackSpy(t, "j")
	b.startWorkerOn(t, ex, worker.Config{ID: "wa", Slots: 1})
	b.startWorkerOn(t, ex, worker.Config{ID: "wb", Slots: 1})

	rw, err := b.client.Watch(t.Context(), "j")
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Stop()
	if _, err := b.client.Submit(waitCtx(t), &jobs.Job{ID: "j", Image: "python", Outputs: []string{"out.txt"}, Code: "unused"}); err != nil {
		t.Fatal(err)
	}
	// The spy sees the delivery on its own subscription, which may trail
	// the run.
	testutil.Eventually(t, 10*time.Second, "the first delivery running", func() bool { return b.exec.Running() == 1 && len(acks()) > 0 })
	first := acks()[0]
	if err := spy.Publish(first, []byte("-NAK")); err != nil { // as the lease's end would
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the second delivery running", func() bool { return b.exec.Running() == 2 })
	// The first delivery ends and stores its result ...
	if err := os.WriteFile(filepath.Join(dir, "1"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := rw.Next(waitCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != jobs.StatusSucceeded || len(res.Artifacts) != 1 {
		t.Fatalf("j: %s %q %+v", res.Status, res.Error, res.Artifacts)
	}
	// ... then the second ends, stores its files, and loses the result's
	// create.
	if err := os.WriteFile(filepath.Join(dir, "2"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "both deliveries over", func() bool { return b.exec.Running() == 0 })
	testutil.Eventually(t, 10*time.Second, "the second delivery settled", func() bool {
		c, err := b.js.Consumer(t.Context(), fleet.StreamName, fleet.ConsumerName(jobs.DefaultQueue))
		if err != nil {
			return false
		}
		ci, err := c.Info(t.Context())
		return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0
	})
	stored, err := b.client.Get(t.Context(), "j")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := b.client.DownloadArtifacts(t.Context(), stored.Artifacts, out); err != nil {
		t.Fatalf("the stored result's artifacts: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(out, "out.txt")); string(got) != "run-1\n" {
		t.Errorf("out.txt of the stored result says %q, want the first run's", got)
	}
	// The second run's files, which no stored result names, are gone.
	ws := b.workspaces(t)
	list, err := ws.Artifacts.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != stored.Artifacts[0].Key {
		var names []string
		for _, o := range list {
			names = append(names, o.Name)
		}
		t.Errorf("ARTIFACTS holds %q, want only the stored result's %s", names, stored.Artifacts[0].Key)
	}
}
