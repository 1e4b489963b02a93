package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/workspace"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// A job's step moves its workspace's head through the states of package
// workspace (workspace.Transition), by compare-and-swap on the key's
// revision (workspace.Heads).

// heads is the bucket of the heads.
func (w *Worker) heads() workspace.Heads { return workspace.Heads{KV: w.stores.Workspaces.Heads} }

// releaseHead removes job's step from the head of name, if it holds it
// (under lease, when lease is set).
func (w *Worker) releaseHead(name, job, lease string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err := w.heads().Move(ctx, name, func(*jobs.WorkspaceHead) any {
		return workspace.Release{Job: job, Lease: lease, Now: time.Now().UTC()}
	})
	if err != nil {
		log.Warn("release the workspace; the next job holds it once this job's result is seen", "err", err)
	}
}

// holderGone reports whether job has finished: it has a result, or is no
// longer in the stream (a job leaves it only once its result is stored).
func (w *Worker) holderGone(ctx context.Context, job string) (bool, error) {
	if res, err := w.lookup(job); err != nil {
		return false, err
	} else if res != nil {
		return true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := w.stores.Stream.GetLastMsgForSubject(ctx, fleet.SubjectPrefix+"*."+job)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true, nil
	}
	return false, err
}
