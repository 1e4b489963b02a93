package batch

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"

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

// Progress is a snapshot of a running batch.
type Progress struct {
	Total    int                 // valid jobs in the input
	Done     int                 // results received
	Reused   int                 // of Done, stored before this run
	InFlight int                 // looked up or published, no result yet
	Bad      int                 // bad lines
	Statuses map[jobs.Status]int // results by status
	Elapsed  time.Duration       // since Run started publishing
	// Rate is the results per second produced by the fleet during this
	// run (reused results excluded); 0 until the first arrives.
	Rate float64
	// ETA is the time left at Rate; -1 while unknown.
	ETA time.Duration
}

// Summary is the end of a batch. Its JSON form is `submit batch --json`.
type Summary struct {
	Name    string `json:"batch"`
	Total   int    `json:"total"`
	Done    int    `json:"done"`
	Reused  int    `json:"reused"`
	Pending int    `json:"pending"` // not finished when Run returned
	// InFlight are the pending jobs that were published (or found queued):
	// they go on in the fleet after an interruption.
	InFlight    int                 `json:"in_flight"`
	Bad         int                 `json:"bad_lines"`
	Statuses    map[jobs.Status]int `json:"statuses"`
	Duration    Percentiles         `json:"duration_ms"`
	WallMS      int64               `json:"wall_ms"`
	Throughput  float64             `json:"throughput_per_s"` // results of this run per second of wall time
	Interrupted bool                `json:"interrupted"`
	// Passed counts the succeeded results; Groups the pass counts and
	// pass@1 per label value (every label but batch_line and task_id,
	// and of a key with at most 100 values).
	Passed int     `json:"passed"`
	Groups []Group `json:"groups"`
	// Retried counts the jobs run again under a new ID by RetryErrors.
	Retried int `json:"retried,omitempty"`
}

// Percentiles of the jobs' durations (Result.DurationMS), null when no
// result had one.
type Percentiles struct {
	P50 *int64 `json:"p50"`
	P95 *int64 `json:"p95"`
	Max *int64 `json:"max"`
}

// AllSucceeded reports whether every line was a valid job that succeeded.
func (s *Summary) AllSucceeded() bool {
	return s.Bad == 0 && s.Pending == 0 && s.Done == s.Total && s.Statuses[jobs.StatusSucceeded] == s.Total
}

// Runner runs one batch. Progress may be called concurrently with Run.
type Runner struct {
	client *jobs.Client
	cfg    Config

	mu        sync.Mutex
	inflight  map[string]*flight // by job ID
	total     int
	done      int
	reused    int
	bad       int
	statuses  map[jobs.Status]int
	durations []int64
	started   time.Time
	allDone   chan struct{} // closed when done == total after publishing ended
	feeding   bool

	sinkMu sync.Mutex
	sem    chan struct{} // the window: one token per job in flight

	groups  groups
	record  record
	passed  int
	retried int
}

var badNameChars = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// CleanName turns s into a batch name usable in job IDs.
func CleanName(s string) string {
	s = badNameChars.ReplaceAllString(s, "-")
	if len(s) > 64 {
		s = s[:64]
	}
	return s
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
		cfg.Backoff = func() backoff.BackOff {
			return backoff.NewExponentialBackOff(
				backoff.WithInitialInterval(100*time.Millisecond),
				backoff.WithMaxInterval(5*time.Second),
				backoff.WithMaxElapsedTime(0))
		}
	}
	if cfg.RetryFor <= 0 {
		cfg.RetryFor = 2 * time.Minute
	}
	return &Runner{
		client:   client,
		cfg:      cfg,
		inflight: map[string]*flight{},
		statuses: map[jobs.Status]int{},
		allDone:  make(chan struct{}),
		sem:      make(chan struct{}, cfg.Window),
	}, nil
}

// Name returns the batch name used in derived IDs, once cleaned.
func (r *Runner) Name() string { return r.cfg.Name }

// flight is a job looked up or published, waiting for its result.
type flight struct {
	line      int
	published bool // in the fleet: published now, or queued by an earlier run
	image     string
}

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
	// Pass 1: validate and count.
	total := 0
	err := r.scan(input, func(line int, _ *jobs.Job, err error) error {
		if err != nil {
			r.mu.Lock()
			r.bad++
			r.mu.Unlock()
			if r.cfg.OnBadLine != nil {
				r.cfg.OnBadLine(BadLine{Line: line, Err: err})
			}
			return nil
		}
		total++
		return ctx.Err()
	})
	if err != nil {
		return r.summary(start, ctx.Err() != nil), err
	}
	r.mu.Lock()
	r.total = total
	bad := r.bad
	r.mu.Unlock()
	if r.cfg.Strict && bad > 0 {
		return r.summary(start, false), fmt.Errorf("%w: %d bad lines, nothing published", ErrBadInput, bad)
	}
	if _, err := input.Seek(0, io.SeekStart); err != nil {
		return r.summary(start, false), fmt.Errorf("rewind the input: %w", err)
	}
	if r.cfg.OnStart != nil {
		if err := r.cfg.OnStart(total); err != nil {
			return r.summary(start, false), err
		}
	}

	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The watch is open before any lookup, so a result stored after a
	// lookup missed it is still delivered.
	watch, err := r.client.Stores().Results.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		return r.summary(start, false), fmt.Errorf("%w: watch results: %w", ErrUnavailable, err)
	}
	defer watch.Stop()

	r.mu.Lock()
	r.started = time.Now()
	r.feeding = true
	r.mu.Unlock()

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
	// Pass 2: stream the jobs through the window.
	feedErr := r.scan(input, func(line int, job *jobs.Job, err error) error {
		if err != nil {
			return nil // reported in pass 1
		}
		select {
		case r.sem <- struct{}{}:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		r.mu.Lock()
		r.inflight[job.ID] = &flight{line: line, image: job.Image}
		r.record.job(job)
		r.mu.Unlock()
		select {
		case work <- item{line, job}:
			return nil
		case <-ctx.Done():
			r.forget(job.ID)
			return context.Cause(ctx)
		}
	})
	close(work)
	if feedErr != nil && ctx.Err() == nil {
		cancel(fmt.Errorf("read the input: %w", feedErr))
	}
	r.mu.Lock()
	r.feeding = false
	r.checkDoneLocked()
	r.mu.Unlock()

	select {
	case <-r.allDone:
	case <-ctx.Done():
	}
	cause := context.Cause(ctx)
	cancel(nil)
	wg.Wait()
	if cause != nil && parent.Err() == nil {
		return r.summary(start, false), cause // a sink, publish or watch failure
	}
	r.mu.Lock()
	finished := r.done == r.total
	r.mu.Unlock()
	if !finished {
		return r.summary(start, true), parent.Err()
	}
	return r.summary(start, false), nil
}

// forget drops a job from the in-flight set and frees its window slot,
// unless a result got there first.
func (r *Runner) forget(id string) {
	r.mu.Lock()
	_, ok := r.inflight[id]
	delete(r.inflight, id)
	r.mu.Unlock()
	if ok {
		<-r.sem
	}
}

// checkDoneLocked closes allDone once every job has its result.
func (r *Runner) checkDoneLocked() {
	if !r.feeding && r.done >= r.total && len(r.inflight) == 0 {
		select {
		case <-r.allDone:
		default:
			close(r.allDone)
		}
	}
}

// complete hands a result to the sink, once per job: the watch and a
// lookup may both find it.
func (r *Runner) complete(res *jobs.Result, reused bool) error {
	r.mu.Lock()
	f, ok := r.inflight[res.ID]
	r.mu.Unlock()
	if !ok {
		return nil
	}
	line := f.line
	r.sinkMu.Lock()
	defer r.sinkMu.Unlock()
	r.mu.Lock()
	if _, ok := r.inflight[res.ID]; !ok { // the other path won meanwhile
		r.mu.Unlock()
		return nil
	}
	delete(r.inflight, res.ID)
	r.mu.Unlock()
	var err error
	if r.cfg.OnResult != nil {
		err = r.cfg.OnResult(Outcome{Line: line, Result: res, Reused: reused})
	}
	r.mu.Lock()
	r.done++
	if reused {
		r.reused++
	}
	r.statuses[res.Status]++
	if res.Status == jobs.StatusSucceeded {
		r.passed++
	}
	r.groups.add(res, res.ID)
	r.record.result(f.image, res)
	if res.RetryOf != "" && !reused {
		r.retried++
	}
	if res.DurationMS != nil {
		r.durations = append(r.durations, *res.DurationMS)
	}
	r.checkDoneLocked()
	r.mu.Unlock()
	<-r.sem
	return err
}

// dispatch feeds results from the watch to the jobs in flight.
func (r *Runner) dispatch(ctx context.Context, fail context.CancelCauseFunc, w jetstream.KeyWatcher) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() == nil {
					fail(fmt.Errorf("%w: the result watch closed", ErrUnavailable))
				}
				return
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			r.mu.Lock()
			_, mine := r.inflight[e.Key()]
			r.mu.Unlock()
			if !mine {
				continue // another client's job, or one already done
			}
			res, err := jobs.DecodeStoredResult(e.Key(), e.Value())
			if err != nil {
				continue // not ours to repair; the job stays pending
			}
			if err := r.complete(res, false); err != nil {
				fail(err)
				return
			}
		}
	}
}

// submit reuses a stored result or publishes the job, retrying with
// back-off while the queue is full or NATS fails.
func (r *Runner) submit(ctx context.Context, it item) error {
	var firstFail time.Time
	op := func() error {
		r.mu.Lock()
		_, waiting := r.inflight[it.job.ID]
		r.mu.Unlock()
		if !waiting {
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
			r.mu.Lock()
			if f, ok := r.inflight[it.job.ID]; ok {
				f.published = true
			}
			r.mu.Unlock()
			return nil
		case ctx.Err() != nil:
			return backoff.Permanent(context.Cause(ctx))
		case errors.Is(err, jobs.ErrInvalidJob): // refused by the server, e.g. its size
			r.forget(it.job.ID)
			r.sinkMu.Lock()
			r.mu.Lock()
			r.bad++
			r.total--
			r.checkDoneLocked()
			r.mu.Unlock()
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

// scan reads input line by line and calls fn with each non-blank line's
// job (its ID derived when it has none, its queue defaulted) or the reason
// it is bad. It stops at fn's first error.
func (r *Runner) scan(input io.Reader, fn func(line int, job *jobs.Job, err error) error) error {
	br := bufio.NewReaderSize(input, 64<<10)
	occ := map[[8]byte]uint32{} // content hash → lines seen with it
	seen := map[[8]byte]int{}   // ID hash → first line
	var buf []byte
	for n := 1; ; n++ {
		line, tooLong, err := readLine(br, &buf, r.cfg.MaxLineBytes)
		if errors.Is(err, io.EOF) && len(line) == 0 && !tooLong {
			return nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if len(bytes.TrimSpace(line)) == 0 && !tooLong {
			continue
		}
		var job *jobs.Job
		var bad error
		if tooLong {
			bad = fmt.Errorf("%w: line longer than %d bytes", jobs.ErrInvalidJob, r.cfg.MaxLineBytes)
		} else {
			job, bad = r.parse(line, occ)
		}
		if bad == nil {
			idSum := sha256.Sum256([]byte(job.ID))
			key := [8]byte(idSum[:8])
			if first, dup := seen[key]; dup {
				bad = fmt.Errorf("%w: id %q is also the id of line %d", jobs.ErrInvalidJob, job.ID, first)
			} else {
				seen[key] = n
			}
		}
		if bad != nil {
			job = nil
		}
		if err := fn(n, job, bad); err != nil {
			return err
		}
	}
}

// readLine reads one line into *buf without its newline. A line over max
// bytes is consumed whole but not kept: tooLong reports it.
func readLine(br *bufio.Reader, buf *[]byte, max int) (line []byte, tooLong bool, err error) {
	*buf = (*buf)[:0]
	for {
		frag, err := br.ReadSlice('\n')
		if !tooLong {
			if len(*buf)+len(frag) > max+1 { // +1: the newline
				tooLong = true
				*buf = (*buf)[:0]
			} else {
				*buf = append(*buf, frag...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line = bytes.TrimSuffix(*buf, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if cap(*buf) > 1<<20 && len(*buf) < 64<<10 {
			*buf = nil // do not keep one huge line's buffer for the rest
		}
		return line, tooLong, err
	}
}

// parse decodes and validates one line and gives it its ID.
func (r *Runner) parse(line []byte, occ map[[8]byte]uint32) (*jobs.Job, error) {
	job, err := jobs.Decode(line, r.cfg.MaxLineBytes)
	if err != nil {
		return nil, err
	}
	if job.ID == "" {
		canonical, err := json.Marshal(job)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", jobs.ErrInvalidJob, err)
		}
		cs := sha256.Sum256(canonical)
		key := [8]byte(cs[:8])
		k := occ[key]
		occ[key]++
		job.ID = DeriveID(r.cfg.Name, canonical, k)
	}
	if job.Queue == "" {
		job.Queue = r.cfg.Queue
	}
	if r.cfg.Amend != nil {
		if err := r.cfg.Amend(job); err != nil {
			return nil, err
		}
	}
	if _, _, err := jobs.Encode(job, r.cfg.MaxLineBytes); err != nil {
		return nil, err
	}
	return job, nil
}

// DeriveID is the ID of a line without one: name, then 24 hex digits of
// the SHA-256 of the name, the line's canonical JSON (a jobs.Job as
// json.Marshal writes it) and k, the number of earlier lines of the batch
// with the same canonical JSON.
func DeriveID(name string, canonical []byte, k uint32) string {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write(canonical)
	var kb [4]byte
	binary.BigEndian.PutUint32(kb[:], k)
	h.Write(kb[:])
	return name + "-" + hex.EncodeToString(h.Sum(nil)[:12])
}

func (r *Runner) publishedLocked() int {
	n := 0
	for _, f := range r.inflight {
		if f.published {
			n++
		}
	}
	return n
}

// Progress returns a snapshot of the batch.
func (r *Runner) Progress() Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := Progress{
		Total:    r.total,
		Done:     r.done,
		Reused:   r.reused,
		InFlight: len(r.inflight),
		Bad:      r.bad,
		Statuses: make(map[jobs.Status]int, len(r.statuses)),
		ETA:      -1,
	}
	for k, v := range r.statuses {
		p.Statuses[k] = v
	}
	if !r.started.IsZero() {
		p.Elapsed = time.Since(r.started)
	}
	if ran := r.done - r.reused; ran > 0 && p.Elapsed > 0 {
		p.Rate = float64(ran) / p.Elapsed.Seconds()
		p.ETA = time.Duration(float64(r.total-r.done) / p.Rate * float64(time.Second))
	}
	return p
}

func (r *Runner) summary(start time.Time, interrupted bool) *Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	wall := time.Since(start)
	s := &Summary{
		Passed:      r.passed,
		Groups:      r.groups.summary(),
		Retried:     r.retried,
		Name:        r.cfg.Name,
		Total:       r.total,
		Done:        r.done,
		Reused:      r.reused,
		Pending:     r.total - r.done,
		InFlight:    r.publishedLocked(),
		Bad:         r.bad,
		Statuses:    map[jobs.Status]int{},
		WallMS:      wall.Milliseconds(),
		Interrupted: interrupted,
	}
	for k, v := range r.statuses {
		s.Statuses[k] = v
	}
	if wall > 0 {
		s.Throughput = math.Round(float64(r.done-r.reused)/wall.Seconds()*100) / 100
	}
	if len(r.durations) > 0 {
		d := slices.Clone(r.durations)
		slices.Sort(d)
		pick := func(q float64) *int64 {
			// nearest rank
			i := int(math.Ceil(q*float64(len(d)))) - 1
			v := d[max(0, min(i, len(d)-1))]
			return &v
		}
		s.Duration = Percentiles{P50: pick(0.50), P95: pick(0.95), Max: pick(1)}
	}
	return s
}

// FormatStatuses formats a status count map in the order of jobs.Statuses.
func FormatStatuses(m map[jobs.Status]int) string {
	var b bytes.Buffer
	for _, st := range jobs.Statuses {
		if m[st] == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(string(st) + " " + strconv.Itoa(m[st]))
	}
	if b.Len() == 0 {
		return "none yet"
	}
	return b.String()
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
			r.move(orig, id)
			it.job = &j
			return nil, err
		case err != nil:
			return nil, err
		case got.Status != jobs.StatusError:
			r.move(orig, id)
			return got, nil
		}
		res = got
	}
	r.move(orig, res.ID)
	return res, nil // out of retries: the last error stands
}

// move re-keys a flight: its result comes under the new ID.
func (r *Runner) move(from, to string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.inflight[from]; ok && from != to {
		delete(r.inflight, from)
		r.inflight[to] = f
	}
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
