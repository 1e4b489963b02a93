package batch

import (
	"context"
	"sync"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// tracker owns the window: the jobs in flight in it and the counts of the
// batch, under one lock. A job takes a slot (add) before it is handed to
// a submitter and gives it back once its result is counted (finish) or
// it is dropped (forget), so no more than Config.Window jobs are ever
// looked up, published or waited for at once.
type tracker struct {
	slots chan struct{} // one token per job in flight

	mu       sync.Mutex
	inflight map[string]*flight // by job ID
	feeding  bool               // pass 2 is still reading the input
	stats    stats
	allDone  chan struct{} // closed once feeding ended and every job has its result
}

// flight is a job looked up or published, waiting for its result.
type flight struct {
	line      int
	published bool   // in the fleet: published now, or queued by an earlier run
	image     string // its preset, for the run manifest
	claim     jobs.Claim
}

func newTracker(window int) *tracker {
	return &tracker{
		slots:    make(chan struct{}, window),
		inflight: map[string]*flight{},
		stats:    stats{statuses: map[jobs.Status]int{}},
		allDone:  make(chan struct{}),
	}
}

// badLine counts a line found bad while validating.
func (t *tracker) badLine() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stats.bad++
}

// setTotal sets the number of valid jobs, once validated, and returns the
// number of bad lines.
func (t *tracker) setTotal(n int) (bad int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stats.total = n
	return t.stats.bad
}

// startFeeding marks the start of publishing: the clock of the rate starts.
func (t *tracker) startFeeding() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stats.started = time.Now()
	t.feeding = true
}

// endFeeding marks the input read: allDone closes once the jobs in
// flight have their results.
func (t *tracker) endFeeding() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.feeding = false
	t.checkDoneLocked()
}

// add takes a slot of the window for the job of line, waiting for one
// while the window is full. It returns ctx's cause when ctx ends first.
func (t *tracker) add(ctx context.Context, job *jobs.Job, line int) error {
	select {
	case t.slots <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inflight[job.ID] = &flight{line: line, image: job.Image, claim: jobs.ClaimOf(job)}
	t.stats.manifest.job(job)
	return nil
}

// waiting reports whether the job is in flight: it has no result yet.
func (t *tracker) waiting(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.inflight[id]
	return ok
}

// published records that the job is in the fleet, where it goes on after
// an interruption.
func (t *tracker) published(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f, ok := t.inflight[id]; ok {
		f.published = true
	}
}

// forget drops a job from the window and frees its slot, unless a result
// got there first.
func (t *tracker) forget(id string) {
	t.mu.Lock()
	_, ok := t.inflight[id]
	delete(t.inflight, id)
	t.mu.Unlock()
	if ok {
		<-t.slots
	}
}

// take removes a job that has its result from the in-flight set and
// returns its line; ok is false when it was not there (its result was
// taken already). Its slot stays taken until finish counts the result.
func (t *tracker) take(id string) (f *flight, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok = t.inflight[id]
	if !ok {
		return nil, false
	}
	delete(t.inflight, id)
	return f, true
}

// move re-keys a flight (a retry of its job): its result comes under the
// new ID.
func (t *tracker) move(from, to string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f, ok := t.inflight[from]; ok && from != to {
		delete(t.inflight, from)
		t.inflight[to] = f
	}
}

// manifest is Runner.Manifest's record of the jobs and their images.
func (t *tracker) manifest(fill func(*record)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fill(&t.stats.manifest)
}

// finish counts the result of a job taken out of flight and frees its
// slot.
func (t *tracker) finish(f *flight, res *jobs.Result, reused bool) {
	t.mu.Lock()
	t.stats.record(res, reused)
	t.stats.manifest.result(f.image, res)
	t.checkDoneLocked()
	t.mu.Unlock()
	<-t.slots
}

// conflicted counts a job taken out of flight whose ID holds another
// job's result as a bad line, and frees its slot.
func (t *tracker) conflicted() {
	t.mu.Lock()
	t.stats.bad++
	t.stats.total--
	t.checkDoneLocked()
	t.mu.Unlock()
	<-t.slots
}

// refused counts a job the server refused as a bad line instead of a job
// of the batch.
func (t *tracker) refused() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stats.bad++
	t.stats.total--
	t.checkDoneLocked()
}

// checkDoneLocked closes allDone once every job has its result.
func (t *tracker) checkDoneLocked() {
	if !t.feeding && t.stats.done >= t.stats.total && len(t.inflight) == 0 {
		select {
		case <-t.allDone:
		default:
			close(t.allDone)
		}
	}
}

// finished reports whether every job of the batch has its result.
func (t *tracker) finished() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats.done == t.stats.total
}

// progress is Runner.Progress.
func (t *tracker) progress() Progress {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats.progress(len(t.inflight))
}

// summary is the batch's Summary, for a run that started at start.
func (t *tracker) summary(name string, start time.Time, interrupted bool) *Summary {
	t.mu.Lock()
	defer t.mu.Unlock()
	published := 0
	for _, f := range t.inflight {
		if f.published {
			published++
		}
	}
	return t.stats.summary(name, time.Since(start), published, interrupted)
}
