package executor

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/egressnet"
)

// A container whose removal failed is stuck: the engine answered an error
// ("Could not kill running container ..., cannot remove", "removal already
// in progress") or did not answer in time. Such a container often goes
// once the engine settles, and a worker runs for weeks: it is retried in
// the background, with a back-off, until it is gone or the executor
// closes (what is left then, the next start's Reap removes). Its uid and
// its network stay claimed until it is gone: the container still holds
// its name on the engine, and a network cannot go while a container is
// attached to it. Unremovable counts them; the worker exports the count
// and says it is not ready past a threshold.

// stuckTuning is the back-off of the retries: first after the failure,
// doubling up to max.
type stuckTuning struct {
	first, max time.Duration
}

// The first retry is soon: the failure seen most ("Could not kill running
// container ..., cannot remove - Container ... is not running") is the
// engine's race with a container that is exiting, over within a second.
var defaultStuckTuning = stuckTuning{first: time.Second, max: 5 * time.Minute}

// closeStuckWait bounds the last tries at Close.
const closeStuckWait = 5 * time.Second

// stuckBox is one container to retry. uid is its claim when claimed (a
// leftover Reap found is no claim of this executor's).
type stuckBox struct {
	id      string
	uid     uint32
	claimed bool
	net     *egressnet.Attachment
	tries   int
	next    time.Time
}

// stuckSet holds the stuck containers and owns the goroutine that retries
// them: it runs while there are any, and Close stops and waits for it.
type stuckSet struct {
	tune    stuckTuning
	mu      sync.Mutex
	boxes   map[string]*stuckBox
	running bool // the retry goroutine runs
	closed  bool // Close began: no goroutine starts any more
	kick    chan struct{}
	wg      sync.WaitGroup
}

func newStuckSet(t stuckTuning) *stuckSet {
	if t.first <= 0 {
		t = defaultStuckTuning
	}
	return &stuckSet{tune: t, boxes: map[string]*stuckBox{}, kick: make(chan struct{}, 1)}
}

// Unremovable is how many containers of this worker the executor failed to
// remove and is retrying now: its own sandboxes, and leftovers Reap found.
func (e *Executor) Unremovable() int {
	e.stuck.mu.Lock()
	defer e.stuck.mu.Unlock()
	return len(e.stuck.boxes)
}

// isStuck reports whether id is being retried already.
func (e *Executor) isStuck(id string) bool {
	e.stuck.mu.Lock()
	defer e.stuck.mu.Unlock()
	return e.stuck.boxes[id] != nil
}

// stick hands a container whose removal failed to the retries; uid (when
// claimed) and net are released once it is gone.
func (e *Executor) stick(id string, uid uint32, claimed bool, net *egressnet.Attachment, err error) {
	s := e.stuck
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.boxes[id] != nil {
		return
	}
	s.boxes[id] = &stuckBox{id: id, uid: uid, claimed: claimed, net: net, tries: 1, next: time.Now().Add(s.tune.first)}
	e.cfg.Logger.Error("removing a sandbox failed; retrying in the background", "container", shortID(id),
		"worker", e.cfg.WorkerID, "retry_in", s.tune.first, "stuck", len(s.boxes), "error", err)
	select {
	case s.kick <- struct{}{}:
	default:
	}
	if s.running || s.closed || e.isClosing() {
		return
	}
	s.running = true
	s.wg.Go(e.retryStuck)
}

// retryStuck removes the stuck containers as they come due, until none is
// left or the executor closes.
func (e *Executor) retryStuck() {
	s := e.stuck
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if len(s.boxes) == 0 || s.closed || e.isClosing() {
			s.running = false
			s.mu.Unlock()
			return
		}
		var due []*stuckBox
		next := time.Time{}
		now := time.Now()
		for _, b := range s.boxes {
			if !b.next.After(now) {
				due = append(due, b)
			} else if next.IsZero() || b.next.Before(next) {
				next = b.next
			}
		}
		s.mu.Unlock()
		for _, b := range due {
			e.retryOne(context.Background(), b)
		}
		if len(due) > 0 {
			continue
		}
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-s.kick:
		case <-e.closing:
		}
	}
}

// retryOne tries to remove b once more: gone, it leaves the set and its
// claims are released; still there, its next try is put off.
func (e *Executor) retryOne(ctx context.Context, b *stuckBox) {
	_, err := e.api.ContainerRemove(ctx, b.id, client.ContainerRemoveOptions{Force: true})
	if err == nil || cerrdefs.IsNotFound(err) {
		s := e.stuck
		s.mu.Lock()
		delete(s.boxes, b.id)
		left := len(s.boxes)
		s.mu.Unlock()
		if b.claimed {
			e.freeUID(b.uid)
		}
		e.dropNet(ctx, b.net)
		e.cfg.Logger.Info("removed a sandbox whose removal had failed", "container", shortID(b.id),
			"worker", e.cfg.WorkerID, "tries", b.tries+1, "stuck", left)
		return
	}
	s := e.stuck
	s.mu.Lock()
	defer s.mu.Unlock()
	wait := s.tune.first << min(b.tries, 20)
	if wait > s.tune.max || wait <= 0 {
		wait = s.tune.max
	}
	b.tries++
	b.next = time.Now().Add(wait)
	e.cfg.Logger.Warn("removing a stuck sandbox failed again; retrying later", "container", shortID(b.id),
		"worker", e.cfg.WorkerID, "tries", b.tries, "retry_in", wait, "error", err)
}

// isClosing reports whether Close began.
func (e *Executor) isClosing() bool {
	select {
	case <-e.closing:
		return true
	default:
		return false
	}
}

// closeStuck stops the retries and waits for the goroutine. What is left
// stays for the next start's Reap.
func (e *Executor) closeStuck() {
	s := e.stuck
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
	// One last try each, bounded: a worker that stops leaves nothing the
	// engine would remove now.
	s.mu.Lock()
	boxes := slices.Collect(maps.Values(s.boxes))
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), closeStuckWait)
	defer cancel()
	for _, b := range boxes {
		if ctx.Err() == nil {
			e.retryOne(ctx, b)
		}
	}
	s.mu.Lock()
	left := len(s.boxes)
	s.mu.Unlock()
	if left > 0 {
		e.cfg.Logger.Error("sandboxes that could not be removed are left to the next start's Reap", "count", left, "worker", e.cfg.WorkerID)
	}
}
