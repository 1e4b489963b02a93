package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/retry"
	"github.com/sandfleet/sandfleet/internal/shorten"
)

// Errors of the client API. Test for them with errors.Is.
var (
	// ErrQueueFull: the stream is at its MaxMsgs or MaxBytes limit and
	// refused the job (DiscardNew). Nothing was queued; retry later.
	ErrQueueFull = errors.New("queue full")
	// ErrNotFound: no result and no queued or running job has this ID.
	ErrNotFound = errors.New("job not found")
	// ErrFinished: Cancel found the job already finished (a
	// *FinishedError, which holds its result).
	ErrFinished = errors.New("job already finished")
	// ErrCancelPending: Cancel recorded the cancel request, but no canceled
	// result was stored within Config.CancelWait and the client could
	// not store one itself (a fleet's submitter may not write RESULTS).
	// The request stands: the worker that takes the job finishes it as
	// canceled without running it. Wait returns that result.
	ErrCancelPending = errors.New("cancel requested; the job will finish as canceled when a worker takes it")
)

// perSubjectRefusal is how the server's error describes a message refused
// for the one-per-subject limit of JOBS (its ErrMaxMsgsPerSubject): the
// code is the same JSStreamStoreFailedF as a full stream's, and only the
// description tells "this job is queued already" from "the queue is full".
const perSubjectRefusal = "maximum messages per subject exceeded"

// Client is what an orchestrator imports to submit jobs and read results.
// It is safe for concurrent use.
type Client struct {
	js  jetstream.JetStream
	cfg Config
	acc access // what the client reaches: the fleet's, or a tenant's (access.go)

	wsMu sync.Mutex
	ws   *fleet.WorkspaceStores           // opened on first use (workspace_client.go)
	objs map[string]jetstream.ObjectStore // tenants' object stores by bucket, bound on first use
}

// NewClient opens the fleet's stream and buckets, creating with the
// defaults those that are missing, and returns a client.
func NewClient(ctx context.Context, js jetstream.JetStream, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	st, err := cfg.topology().Open(ctx, js)
	if err != nil {
		return nil, err
	}
	c := &Client{js: js, cfg: cfg.withDefaults()}
	c.acc = &fleetAccess{c: c, st: st}
	return c, nil
}

// Encode normalizes and validates a copy of job and returns it with its wire
// form, refusing one over maxBytes (0 means MaxJobBytes).
func Encode(job *Job, maxBytes int) (*Job, []byte, error) {
	if maxBytes <= 0 {
		maxBytes = MaxJobBytes
	}
	j := *job
	j.Normalize()
	if err := j.Validate(); err != nil {
		return nil, nil, err
	}
	data, err := json.Marshal(&j)
	if err != nil {
		return nil, nil, invalid("encode: %v", err)
	}
	if len(data) > maxBytes {
		return nil, nil, invalid("job is %d bytes, over the cap of %d", len(data), maxBytes)
	}
	return &j, data, nil
}

// Submit queues job on jobs.<queue>.<id> and returns its ID: job.ID, or a
// fresh UUIDv7 when empty (job itself is not modified). A second Submit of
// the same ID while the job is still queued or running is refused by the
// stream (one message per subject) and Submit returns the ID as queued;
// one after the job has finished is taken by a worker that finds the
// stored result. Either way the job runs once. It sets no Nats-Msg-Id: the
// stream's duplicate window spans every tenant, and one tenant's publish
// with another's ID as its Nats-Msg-Id would make that one's Submit be
// dropped unseen.
// A full stream yields ErrQueueFull; an invalid job an error wrapping
// ErrInvalidJob.
func (c *Client) Submit(ctx context.Context, job *Job) (string, error) {
	id, _, err := c.Enqueue(ctx, job)
	return id, err
}

// Enqueue is Submit, and reports whether this publish queued the job:
// false when the stream refused it because the job is queued or running
// already, in which case the job's reply_to is its first publisher's, and
// only RESULTS (Watch) tells this caller of its end.
func (c *Client) Enqueue(ctx context.Context, job *Job) (id string, queued bool, err error) {
	job, err = c.qualifyJob(job)
	if err != nil {
		return "", false, err
	}
	j, data, err := Encode(job, c.cfg.MaxJobBytes)
	if err != nil {
		return "", false, err
	}
	_, err = c.js.Publish(ctx, fleet.Subject(j.Queue, j.ID), data, jetstream.WithExpectStream(fleet.StreamName))
	if err != nil {
		if apiErr := (*jetstream.APIError)(nil); errors.As(err, &apiErr) {
			switch {
			case apiErr.ErrorCode == fleet.ErrCodeStoreFailed && strings.Contains(apiErr.Description, perSubjectRefusal):
				return j.ID, false, nil // queued already, or running
			case apiErr.ErrorCode == fleet.ErrCodeStoreFailed:
				return "", false, fmt.Errorf("submit %s: %w: %w", j.ID, ErrQueueFull, err)
			case apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum:
				return "", false, fmt.Errorf("submit %s: %w: %w", j.ID, ErrInvalidJob, err)
			}
		}
		return "", false, fmt.Errorf("submit %s: %w", j.ID, err)
	}
	return j.ID, true, nil
}

// SubmitWhenRoom is Submit that waits for room: while the queue is full it
// tries again, first after about initial, then after half as long again
// each time, up to about max (each delay spread by half of it either way,
// so that submitters a full queue turned away together do not come back
// together), until ctx ends, and then returns the last ErrQueueFull.
// Other errors are returned at once. Bound the wait with ctx's deadline.
func (c *Client) SubmitWhenRoom(ctx context.Context, job *Job, initial, max time.Duration) (string, error) {
	if initial <= 0 || max < initial {
		return "", fmt.Errorf("submit when room: delays %s to %s: %w", initial, max, ErrInvalidConfig)
	}
	b := retry.Policy{Initial: initial, Max: max}.New()
	var full error
	for {
		id, err := c.Submit(ctx, job)
		switch {
		case err == nil:
			return id, nil
		case errors.Is(err, ErrQueueFull):
			full = err
		case full != nil && ctx.Err() != nil:
			return "", full // the wait ran out: the queue was still full
		default:
			return "", err
		}
		t := time.NewTimer(b.NextBackOff())
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return "", full
		}
	}
}

// Get returns the stored result of a job, or ErrNotFound when there is none
// (yet: the job may still be queued or running; see Pending).
func (c *Client) Get(ctx context.Context, id string) (*Result, error) {
	return c.acc.get(ctx, id)
}

// Pending reports whether a job with this ID is in the stream: queued, or
// running (a job leaves the stream only once its result is stored). Phase
// tells the two apart.
func (c *Client) Pending(ctx context.Context, id string) (bool, error) {
	if !ValidID(id) {
		return false, nil
	}
	st, err := c.acc.stores()
	if err != nil {
		return false, fmt.Errorf("pending: %w", err)
	}
	_, err = st.Stream.GetLastMsgForSubject(ctx, fleet.SubjectPrefix+"*."+id)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up %s: %w", id, err)
	}
	return true, nil
}

// ErrForeignResult is returned for a stored result that names another job
// than the key it is stored under: the workers never write one, so it was
// written by someone else and is not trusted.
var ErrForeignResult = errors.New("result names another job")

// DecodeResult parses a result as published to a reply subject.
func DecodeResult(data []byte) (*Result, error) {
	var r Result
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decode result: %w", err)
	}
	return &r, nil
}

// ErrNotReply is DecodeReply's error for a message that is not a worker's
// reply on the subject it names.
var ErrNotReply = errors.New("not a worker's reply")

// DecodeReply parses a message received on a job's reply_to as the job's
// result, refusing one that is not a worker's reply there. Permissions
// allow a publish into results.<t>.> or _INBOX.<t>.> to the fleet's
// workers only, but a JetStream push consumer delivers to the subject its
// creator names, which the server does not check against its creator's
// permissions: a tenant (or anyone who may create a consumer) can have
// the server deliver a message of its own, a forged result, to another's
// reply subject. Such a delivery keeps its stream's subject ($KV...,
// events...), which is never a reply subject, and carries a JetStream ack
// subject; a worker's reply is a plain publish on reply_to.
func DecodeReply(m *nats.Msg, replyTo string) (*Result, error) {
	if m.Subject != replyTo || strings.HasPrefix(m.Reply, "$JS.ACK.") {
		return nil, fmt.Errorf("%w: a message on %s with reply %q, for reply_to %s", ErrNotReply,
			shorten.Text(m.Subject, 140), shorten.Text(m.Reply, 140), shorten.Text(replyTo, 140))
	}
	return DecodeResult(m.Data)
}

// DecodeStoredResult parses the result stored in RESULTS under key id.
func DecodeStoredResult(id string, data []byte) (*Result, error) {
	r, err := DecodeResult(data)
	if err != nil {
		return nil, err
	}
	if r.ID != id {
		return nil, fmt.Errorf("%w: stored for %s, names %s", ErrForeignResult, shorten.Text(id, 140), shorten.Text(r.ID, 140))
	}
	return r, nil
}

// ResultWatch waits for one job's result. Open it before publishing the job
// so that no result can be missed; Stop it when done.
type ResultWatch struct {
	kw *keyResultWatch
}

// Watch opens a watch on the result of id. The current value, if any, is
// delivered first.
func (c *Client) Watch(ctx context.Context, id string) (*ResultWatch, error) {
	if !ValidID(id) {
		return nil, invalid("id %q must match [A-Za-z0-9_-]{1,128}", shorten.Text(id, 140))
	}
	return c.keyWatch(ctx, id)
}

// Next blocks until the result is stored or ctx is done.
func (rw *ResultWatch) Next(ctx context.Context) (*Result, error) {
	return rw.kw.next(ctx)
}

// Stop closes the watch.
func (rw *ResultWatch) Stop() error {
	return rw.kw.stop()
}

// Wait blocks until the job's result is stored, or ctx is done. It does not
// check that the job exists; bound it with a deadline, or use Pending.
func (c *Client) Wait(ctx context.Context, id string) (*Result, error) {
	rw, err := c.Watch(ctx, id)
	if err != nil {
		return nil, err
	}
	defer rw.Stop()
	return rw.Next(ctx)
}

// SubmitAndWait submits job and waits for its result. The watch is opened
// before the publish, so a fast result is not missed. When the result
// stored at the job's ID is another job's (an ID someone else chose
// first), it returns a *ConflictError (ErrConflict) instead.
func (c *Client) SubmitAndWait(ctx context.Context, job *Job) (*Result, error) {
	j := *job
	var err error
	if j.ID, err = c.QualifyID(j.ID); err != nil {
		return nil, err
	}
	j.Normalize()
	rw, err := c.Watch(ctx, j.ID)
	if err != nil {
		return nil, err
	}
	defer rw.Stop()
	if _, err := c.Submit(ctx, &j); err != nil {
		return nil, err
	}
	res, err := rw.Next(ctx)
	if err != nil {
		return nil, err
	}
	// A job ID of the caller's may be one another job used first.
	if err := ClaimOf(&j).Check(res); err != nil {
		return nil, err
	}
	return res, nil
}

// Cancel cancels a job. It stores a cancel request in CANCELS, which every
// worker of the job's queue watches: the worker running the job kills its
// sandbox and stores a canceled result; a job still queued (never
// delivered) is finished as canceled by a worker at once, and any later
// delivery of it finds the request and drops the job unrun.
//
// Cancel waits up to Config.CancelWait for that result. If none comes (no
// worker is up, or the job waits for a redelivery) it stores the canceled
// result itself; when that write fails too, within CancelWait (a fleet's
// submitter may not write RESULTS), it returns ErrCancelPending: the
// request is recorded and the job will finish as canceled.
//
// Cancel returns the job's final result: canceled, or, with a
// *FinishedError (ErrFinished), the result it had already reached. An
// unknown ID yields ErrNotFound.
func (c *Client) Cancel(ctx context.Context, id string) (*Result, error) {
	return c.acc.cancel(ctx, id)
}

// cancel is Cancel for the fleet's client: when the job is in the stream,
// it records the request in CANCELS, waits CancelWait for the canceled
// result and stores one itself if none came.
func (a *fleetAccess) cancel(ctx context.Context, id string) (*Result, error) {
	c := a.c
	if r, err := c.Get(ctx, id); err == nil {
		return r, &FinishedError{Result: r}
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	queued, err := c.Pending(ctx, id)
	if err != nil {
		return nil, err
	}
	if !queued {
		// It may have finished between the two looks.
		if r, err := c.Get(ctx, id); err == nil {
			return r, &FinishedError{Result: r}
		}
		return nil, fmt.Errorf("cancel: %w: %s", ErrNotFound, id)
	}
	req, _ := json.Marshal(fleet.CancelRequest{RequestedAt: time.Now().UTC()})
	rw, err := c.Watch(ctx, id)
	if err != nil {
		return nil, err
	}
	defer rw.Stop()
	if _, err := a.st.Cancels.Put(ctx, id, req); err != nil {
		return nil, fmt.Errorf("cancel %s: %w", id, err)
	}
	wctx, cancel := context.WithTimeout(ctx, c.cfg.CancelWait)
	defer cancel()
	if r, err := rw.Next(wctx); err == nil {
		if r.Status != StatusCanceled {
			return r, &FinishedError{Result: r}
		}
		return r, nil
	} else if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	now := time.Now().UTC()
	res := &Result{ID: id, Status: StatusCanceled, FinishedAt: &now, Error: fleet.CancelReason}
	// A refused publish gets no reply, only a timeout: bound the write.
	sctx, cancel := context.WithTimeout(ctx, c.cfg.CancelWait)
	defer cancel()
	stored, won, err := a.storeCanceled(sctx, res)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("cancel %s: %w (storing the result: %w)", id, ErrCancelPending, err)
	}
	if !won && stored.Status != StatusCanceled {
		return stored, &FinishedError{Result: stored}
	}
	return stored, nil
}

// FinishedError is Cancel's error for a job that had finished before the
// cancel took: Result is its result, also returned beside the error.
type FinishedError struct {
	Result *Result
}

func (e *FinishedError) Error() string {
	return fmt.Sprintf("cancel %s: %s (%s)", e.Result.ID, ErrFinished, e.Result.Status)
}

func (e *FinishedError) Unwrap() error { return ErrFinished }

// storeCanceled stores the canceled result res of a job no worker
// finished, unless another result is stored first. It is far under any
// server's cap: it holds no output to cut.
func (a *fleetAccess) storeCanceled(ctx context.Context, res *Result) (stored *Result, won bool, err error) {
	data, err := json.Marshal(res)
	if err != nil {
		return nil, false, fmt.Errorf("encode result %s: %w", res.ID, err)
	}
	return storeEncoded(ctx, a.st.Results, res, data)
}

// storeEncoded stores r, encoded as data, unless RESULTS holds a result at
// its ID already, and returns the stored result and whether r won.
func storeEncoded(ctx context.Context, kv jetstream.KeyValue, r *Result, data []byte) (stored *Result, won bool, err error) {
	winner, won, err := fleet.CreateFirst(ctx, kv, r.ID, data)
	if err != nil {
		return nil, false, err
	}
	if won {
		return r, true, nil
	}
	w, err := DecodeStoredResult(r.ID, winner)
	if err != nil {
		return nil, false, err
	}
	return w, false, nil
}
