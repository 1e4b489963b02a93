package worker_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/jobindex"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// A job the worker takes is in the index as running, with its spec, and
// once its result is stored as finished, at a newer sequence; the
// heartbeat carries the executor's warm pool.
func TestJobIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec.Pool = &jobs.PoolStatus{Size: 2, Idle: 1}
	b.startWorker(t, worker.Config{ID: "w-index", Slots: 2})
	release := filepath.Join(t.TempDir(), "go")
	job := &jobs.Job{ID: "indexed", Image: "python", Code: "print hi\nwaitfile " + release,
		Files: map[string]string{"lib.py": "X = 1"}, Env: map[string]string{"SECRET": "s3cr3t"},
		Labels: map[string]string{jobs.BatchLabel: "nightly", "task": "7"}}
	if _, err := b.client.Submit(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	idx, err := jobindex.Open(t.Context(), b.js)
	if err != nil {
		t.Fatal(err)
	}
	var running *records.Summary
	testutil.Eventually(t, 10*time.Second, "the running record", func() bool {
		running, err = idx.Summary(t.Context(), "indexed")
		return err == nil
	})
	if running.State != records.Running || running.Worker != "w-index" || running.Attempt != 1 ||
		running.Batch() != "nightly" || running.Queue != "default" || running.StartedAt == nil || running.QueuedAt == nil {
		t.Errorf("running record: %+v", running)
	}
	spec, err := idx.Spec(t.Context(), "indexed")
	if err != nil || spec.Code != job.Code || len(spec.Files) != 1 || spec.Files[0].Text != "X = 1" || spec.Env[0] != "SECRET" {
		t.Errorf("spec: %+v %v", spec, err)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var done *records.Summary
	testutil.Eventually(t, 10*time.Second, "the finished record", func() bool {
		done, err = idx.Summary(t.Context(), "indexed")
		return err == nil && done.State == records.Finished
	})
	if done.Status != jobs.StatusSucceeded || done.Seq <= running.Seq || done.DurationMS == nil || *done.ExitCode != 0 || done.Labels["task"] != "7" {
		t.Errorf("finished record: %+v", done)
	}
	page, err := idx.List(t.Context(), jobindex.Query{Batch: "nightly"})
	if err != nil || len(page.Jobs) != 1 {
		t.Errorf("batch page: %+v %v", page, err)
	}
	st, err := b.client.Status(t.Context())
	if err != nil || len(st.Workers) != 1 || st.Workers[0].Pool == nil || st.Workers[0].Pool.Size != 2 {
		t.Errorf("status: %+v %v", st, err)
	}
}

// A job that ends within moments of being taken is never indexed as
// running: its spec and its finished record are the only two records
// stored for it (the running one would have been replaced at once).
func TestJobIndexShortJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{Slots: 1})
	if res, err := b.client.SubmitAndWait(waitCtx(t), &jobs.Job{ID: "short", Image: "python", Code: "print x"}); err != nil || res.Status != jobs.StatusSucceeded {
		t.Fatal(res, err)
	}
	idx, err := jobindex.Open(t.Context(), b.js)
	if err != nil {
		t.Fatal(err)
	}
	var done *records.Summary
	testutil.Eventually(t, 10*time.Second, "the finished record", func() bool {
		done, err = idx.Summary(t.Context(), "short")
		return err == nil && done.State == records.Finished
	})
	if _, err := idx.Spec(t.Context(), "short"); err != nil {
		t.Errorf("spec: %v", err)
	}
	time.Sleep(time.Second) // past the running record's delay
	st, err := b.js.Stream(t.Context(), fleet.IndexStreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != 2 || info.State.Msgs != 2 {
		t.Errorf("INDEX stored %d records (%d kept), want the spec and the finished record only", info.State.LastSeq, info.State.Msgs)
	}
	if s, err := idx.Summary(t.Context(), "short"); err != nil || s.State != records.Finished {
		t.Errorf("after the delay: %+v %v, want the finished record", s, err)
	}
}

// NoIndex writes nothing.
func TestJobIndexOff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{Slots: 1, NoIndex: true})
	if res, err := b.client.SubmitAndWait(waitCtx(t), &jobs.Job{ID: "unindexed", Image: "python", Code: "print x"}); err != nil || res.Status != jobs.StatusSucceeded {
		t.Fatal(res, err)
	}
	idx, err := jobindex.Open(t.Context(), b.js)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idx.Summary(t.Context(), "unindexed"); !errors.Is(err, jobs.ErrNotFound) {
		t.Errorf("summary with NoIndex: %v", err)
	}
}

var _ worker.PoolReporter = (*fakeexec.Executor)(nil)
