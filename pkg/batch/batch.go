package batch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/sandfleet/sandfleet/internal/retry"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// Errors of Run. Test for them with errors.Is.
var (
	// ErrBadInput: Strict is set and the input has bad lines; nothing was
	// published.
	ErrBadInput = errors.New("bad input")
	// ErrUnavailable: publishing kept failing for Config.RetryFor (NATS
	// unreachable), or the result watch broke.
	ErrUnavailable = errors.New("fleet unavailable")
)

// Config of a Runner. The zero value of each field is its documented default.
type Config struct {
	// Name of the batch, part of every derived job ID. Required; `submit
	// batch` uses the file's base name. Characters outside [A-Za-z0-9_-]
	// become '-', and it is cut to 64 bytes.
	Name string
	// Queue of the lines that name none. Default jobs.DefaultQueue.
	Queue string
	// Window is the most jobs in flight (looked up, published, not yet
	// finished) at once. Default 64.
	Window int
	// Submitters is how many lookups and publishes run concurrently, which
	// hides the round trips to a remote NATS. Default min(Window, 8).
	Submitters int
	// Strict makes any bad line fail the batch before anything is
	// published (ErrBadInput).
	Strict bool
	// MaxLineBytes is the longest line read; a longer one is a bad line.
	// Default jobs.MaxJobBytes.
	MaxLineBytes int
	// Backoff returns the back-off between attempts to publish a job when
	// the queue is full or NATS fails. Default exponential from 100ms to 5s.
	Backoff func() backoff.BackOff
	// RetryFor is how long publishing may fail with errors other than a
	// full queue before Run gives up with ErrUnavailable. A full queue is
	// waited out for as long as ctx lasts. Default 2m.
	RetryFor time.Duration

	// Amend, if set, is called with each line's job once its ID and queue
	// are set, in both passes over the input (so it must give the same
	// answer twice): it may change the job (a gateway records who
	// submitted it in a label) or refuse it, which makes the line bad.
	// The ID is derived before Amend, so what it adds does not change IDs.
	Amend func(*jobs.Job) error

	// OnStart, if set, is called once the input is validated and before
	// anything is published, with the number of jobs. An error aborts Run.
	OnStart func(total int) error
	// OnBadLine, if set, is called for each bad line, in line order during
	// validation (and for a job the server refuses while publishing).
	OnBadLine func(BadLine)
	// OnResult, if set, is called with each result as it arrives. Calls
	// are serialized. An error aborts Run (the jobs in flight go on).
	OnResult func(Outcome) error

	// RetryErrors runs again each job whose stored result is an
	// infrastructure error: as <id>-retry<n> (n from 1, at most
	// MaxRetries; an ID too long for that is cut and hashed, see RetryID),
	// its retry_of the original ID. A retry that is itself an error is
	// retried in turn; a stored retry is reused like any result.
	RetryErrors bool
}

// MaxRetries bounds the retries of one job by RetryErrors.
const MaxRetries = 5

// BadLine is a line that is not a valid job.
type BadLine struct {
	Line int // 1-based
	Err  error
}

func (b BadLine) Error() string { return fmt.Sprintf("line %d: %v", b.Line, b.Err) }

// Outcome is the result of one line's job.
type Outcome struct {
	Line   int // 1-based line number in the input
	Result *jobs.Result
	// Reused is true when the result was stored before this run (a
	// resumed batch) and the job was not published again.
	Reused bool
}

// Runner runs one batch. Progress may be called concurrently with Run.
type Runner struct {
	client *jobs.Client
	cfg    Config
	t      *tracker // the window, the jobs in flight, the counts

	// sinkMu serializes the calls of OnResult and OnBadLine while
	// publishing, and makes taking a result's job out of the window and
	// handing the result on one step: the watch and a lookup may both
	// find it.
	sinkMu sync.Mutex
}

// New returns a Runner of one batch.
func New(client *jobs.Client, cfg Config) (*Runner, error) {
	cfg.Name = CleanName(cfg.Name)
	if cfg.Name == "" {
		return nil, errors.New("batch: Config.Name is required")
	}
	if cfg.Queue == "" {
		cfg.Queue = jobs.DefaultQueue
	}
	if !jobs.ValidQueue(cfg.Queue) {
		return nil, fmt.Errorf("batch: queue %q must match [A-Za-z0-9_-]{1,64}", cfg.Queue)
	}
	if cfg.Window <= 0 {
		cfg.Window = 64
	}
	if cfg.Submitters <= 0 {
		cfg.Submitters = min(cfg.Window, 8)
	}
	if cfg.MaxLineBytes <= 0 {
		cfg.MaxLineBytes = jobs.MaxJobBytes
	}
	if cfg.Backoff == nil {
		cfg.Backoff = retry.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second}.Func()
	}
	if cfg.RetryFor <= 0 {
		cfg.RetryFor = 2 * time.Minute
	}
	return &Runner{client: client, cfg: cfg, t: newTracker(cfg.Window)}, nil
}

// Name returns the batch name used in derived IDs, once cleaned.
func (r *Runner) Name() string { return r.cfg.Name }

// Progress returns a snapshot of the batch.
func (r *Runner) Progress() Progress { return r.t.progress() }

// item is one valid line on its way to the fleet.
type item struct {
	line int
	job  *jobs.Job
}

// Run runs the batch read from input and returns its summary. It returns
// ctx's error when interrupted (the summary says what is pending; running
// the same batch again resumes it), ErrBadInput when Strict and a line is
// bad, and ErrUnavailable when the fleet cannot be reached. A Runner runs
// one batch once.
func (r *Runner) Run(ctx context.Context, input io.ReadSeeker) (*Summary, error) {
	start := time.Now()
	summary := func(interrupted bool) *Summary { return r.t.summary(r.cfg.Name, start, interrupted) }
	total, err := r.count(ctx, input)
	if err != nil {
		return summary(ctx.Err() != nil), err
	}
	bad := r.t.setTotal(total)
	if r.cfg.Strict && bad > 0 {
		return summary(false), fmt.Errorf("%w: %d bad lines, nothing published", ErrBadInput, bad)
	}
	if _, err := input.Seek(0, io.SeekStart); err != nil {
		return summary(false), fmt.Errorf("rewind the input: %w", err)
	}
	if r.cfg.OnStart != nil {
		if err := r.cfg.OnStart(total); err != nil {
			return summary(false), err
		}
	}

	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The watch is open before any lookup, so a result stored after a
	// lookup missed it is still delivered.
	watch, err := r.client.WatchResults(ctx)
	if err != nil {
		if parent.Err() != nil { // interrupted while the watch opened
			return summary(true), parent.Err()
		}
		return summary(false), fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer watch.Stop()

	r.t.startFeeding()
	var wg sync.WaitGroup
	wg.Go(func() { r.dispatch(ctx, cancel, watch) })
	work := make(chan item)
	for range r.cfg.Submitters {
		wg.Go(func() {
			for it := range work {
				if err := r.submit(ctx, it); err != nil {
					cancel(err)
				}
			}
		})
	}
	feedErr := r.feed(ctx, input, work)
	close(work)
	if feedErr != nil && ctx.Err() == nil {
		cancel(fmt.Errorf("read the input: %w", feedErr))
	}
	r.t.endFeeding()

	select {
	case <-r.t.allDone:
	case <-ctx.Done():
	}
	cause := context.Cause(ctx)
	cancel(nil)
	wg.Wait()
	if cause != nil && parent.Err() == nil {
		return summary(false), cause // a sink, publish or watch failure
	}
	if !r.t.finished() {
		return summary(true), parent.Err()
	}
	return summary(false), nil
}

// count is the first pass over the input: it validates and counts the
// jobs, and reports the bad lines.
func (r *Runner) count(ctx context.Context, input io.Reader) (int, error) {
	total := 0
	err := r.scan(input, func(line int, _ *jobs.Job, err error) error {
		if err != nil {
			r.t.badLine()
			if r.cfg.OnBadLine != nil {
				r.cfg.OnBadLine(BadLine{Line: line, Err: err})
			}
			return nil
		}
		total++
		return ctx.Err()
	})
	return total, err
}

// feed is the second pass: it streams the jobs to the submitters through
// the window.
func (r *Runner) feed(ctx context.Context, input io.Reader, work chan<- item) error {
	return r.scan(input, func(line int, job *jobs.Job, err error) error {
		if err != nil {
			return nil // reported in the first pass
		}
		if err := r.t.add(ctx, job, line); err != nil {
			return err
		}
		select {
		case work <- item{line, job}:
			return nil
		case <-ctx.Done():
			r.t.forget(job.ID)
			return context.Cause(ctx)
		}
	})
}

// complete hands a result to the sink, once per job: the watch and a
// lookup may both find it.
func (r *Runner) complete(res *jobs.Result, reused bool) error {
	if !r.t.waiting(res.ID) {
		return nil
	}
	r.sinkMu.Lock()
	defer r.sinkMu.Unlock()
	f, ok := r.t.take(res.ID)
	if !ok { // the other path won meanwhile
		return nil
	}
	if err := f.claim.Check(res); err != nil {
		// Another job ran under this line's ID (someone chose it): its
		// verdict is not this line's.
		if r.cfg.OnBadLine != nil {
			r.cfg.OnBadLine(BadLine{Line: f.line, Err: err})
		}
		r.t.conflicted()
		return nil
	}
	var err error
	if r.cfg.OnResult != nil {
		err = r.cfg.OnResult(Outcome{Line: f.line, Result: res, Reused: reused})
	}
	r.t.finish(f, res, reused)
	return err
}

// dispatch feeds results from the watch to the jobs in flight.
func (r *Runner) dispatch(ctx context.Context, fail context.CancelCauseFunc, w *jobs.ResultsWatch) {
	for {
		stored, err := w.Next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				fail(fmt.Errorf("%w: %w", ErrUnavailable, err))
			}
			return
		}
		if !r.t.waiting(stored.ID) {
			continue // another client's job, or one already done
		}
		res, err := stored.Decode()
		if err != nil {
			continue // not ours to repair; the job stays pending
		}
		if err := r.complete(res, false); err != nil {
			fail(err)
			return
		}
	}
}

// submit reuses a stored result or publishes the job, retrying with
// back-off while the queue is full or NATS fails.
func (r *Runner) submit(ctx context.Context, it item) error {
	var firstFail time.Time
	op := func() error {
		if !r.t.waiting(it.job.ID) {
			return nil // the watch delivered its result already
		}
		res, err := r.client.Get(ctx, it.job.ID)
		if err == nil && r.cfg.RetryErrors && res.Status == jobs.StatusError {
			res, err = r.retry(ctx, &it, res)
		}
		if err == nil {
			return backoff.Permanent(r.complete(res, true))
		}
		if errors.Is(err, jobs.ErrNotFound) {
			_, err = r.client.Submit(ctx, it.job)
		}
		switch {
		case err == nil:
			r.t.published(it.job.ID)
			return nil
		case ctx.Err() != nil:
			return backoff.Permanent(context.Cause(ctx))
		case errors.Is(err, jobs.ErrInvalidJob): // refused by the server, e.g. its size
			r.t.forget(it.job.ID)
			r.sinkMu.Lock()
			r.t.refused()
			if r.cfg.OnBadLine != nil {
				r.cfg.OnBadLine(BadLine{Line: it.line, Err: err})
			}
			r.sinkMu.Unlock()
			return nil
		case errors.Is(err, jobs.ErrQueueFull):
			firstFail = time.Time{}
			return err
		default:
			if firstFail.IsZero() {
				firstFail = time.Now()
			} else if time.Since(firstFail) > r.cfg.RetryFor {
				return backoff.Permanent(fmt.Errorf("%w: %w", ErrUnavailable, err))
			}
			return err
		}
	}
	err := backoff.Retry(op, backoff.WithContext(r.cfg.Backoff(), ctx))
	if err != nil && ctx.Err() != nil {
		return nil // interrupted: Run reports it
	}
	return err
}

// retry follows the retries of a job whose stored result is an error: the
// first retry ID without a stored result becomes the job's (it.job is
// changed, and the flight moves to the new ID), or the first stored retry
// that is not an error is the job's result. It returns jobs.ErrNotFound
// when the job is to be published under its new ID.
func (r *Runner) retry(ctx context.Context, it *item, res *jobs.Result) (*jobs.Result, error) {
	orig := it.job.ID
	for n := 1; n <= MaxRetries; n++ {
		id := RetryID(orig, n)
		got, err := r.client.Get(ctx, id)
		switch {
		case errors.Is(err, jobs.ErrNotFound):
			j := *it.job
			j.ID, j.RetryOf = id, orig
			r.t.move(orig, id)
			it.job = &j
			return nil, err
		case err != nil:
			return nil, err
		case got.RetryOf != orig:
			// Another job's result: a run without RetryErrors ran a line
			// whose own ID this is. Not this job's retry; the next is.
			continue
		case got.Status != jobs.StatusError:
			r.t.move(orig, id)
			return got, nil
		}
		res = got
	}
	r.t.move(orig, res.ID)
	return res, nil // out of retries: the last error stands
}

// RetryID is the ID of a job's n-th retry: <id>-retry<n>, or, when that
// would be over 128 bytes, the ID cut and 16 hex digits of its SHA-256
// put before the suffix, so that two long IDs never share retries.
func RetryID(id string, n int) string {
	suffix := fmt.Sprintf("-retry%d", n)
	if len(id)+len(suffix) <= 128 {
		return id + suffix
	}
	sum := sha256.Sum256([]byte(id))
	h := "-" + hex.EncodeToString(sum[:8])
	return id[:128-len(suffix)-len(h)] + h + suffix
}
