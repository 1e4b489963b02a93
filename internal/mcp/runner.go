package mcp

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// Runner runs the tools' jobs: small enough that the gateway (as the
// caller's token), NATS (jobs.Client) and the gateway's HTTP API
// (HTTPRunner) can each back it.
type Runner interface {
	// Run submits job and returns its result. When ctx ends first, the
	// job is canceled rather than left to run for nobody.
	Run(ctx context.Context, job *jobs.Job) (*jobs.Result, error)
	// WriteArtifact writes the bytes of one of res's artifacts to w.
	WriteArtifact(ctx context.Context, res *jobs.Result, a jobs.Artifact, w io.Writer) error
	// Result reads a finished job's result (jobs.ErrNotFound: none), for
	// the artifacts its links name.
	Result(ctx context.Context, id string) (*jobs.Result, error)
}

// ClientRunner runs jobs over NATS with a jobs.Client.
type ClientRunner struct {
	Client *jobs.Client
	// Admit, if set, is applied to every job before it is submitted (the
	// gateway's token rules); its error is the call's.
	Admit func(*jobs.Job) error
}

var _ Runner = ClientRunner{}

// cancelGrace bounds the cancel of a job whose caller left.
const cancelGrace = 10 * time.Second

// Run submits job and waits for its result.
func (r ClientRunner) Run(ctx context.Context, job *jobs.Job) (*jobs.Result, error) {
	if r.Admit != nil {
		if err := r.Admit(job); err != nil {
			return nil, err
		}
	}
	job.Normalize() // the ID is needed to cancel it
	res, err := r.Client.SubmitAndWait(ctx, job)
	if err != nil && ctx.Err() != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelGrace)
		defer cancel()
		if _, cerr := r.Client.Cancel(cctx, job.ID); cerr != nil && !errors.Is(cerr, jobs.ErrFinished) && !errors.Is(cerr, jobs.ErrCancelPending) {
			return nil, errors.Join(err, cerr)
		}
	}
	return res, err
}

// WriteArtifact reads the artifact from the fleet's object store.
func (r ClientRunner) WriteArtifact(ctx context.Context, _ *jobs.Result, a jobs.Artifact, w io.Writer) error {
	return r.Client.WriteArtifact(ctx, a, w)
}

// Result reads the stored result.
func (r ClientRunner) Result(ctx context.Context, id string) (*jobs.Result, error) {
	return r.Client.Get(ctx, id)
}
