package executor

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/sandfleet/sandfleet/internal/retry"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// poolSweep is how often idle sandboxes are checked for death and age.
// The check only looks at channels and clocks, not at the engine.
const poolSweep = 2 * time.Second

// poolCalm is how long the pool goes without a miss or a drain before it
// shrinks towards Config.Pool.
const poolCalm = 2 * time.Minute

// PoolStats are the warm pool's counters.
type PoolStats struct {
	Size     int   // the target per image now: Config.Pool, grown up to Config.PoolMax under pressure
	Max      int   // Config.PoolMax
	Idle     int   // warm sandboxes ready now, all images
	Launches int64 // launches of warm sandboxes attempted
	Failures int64 // launches that failed
	Hits     int64 // jobs handed to a warm sandbox
	Misses   int64 // pool-eligible jobs that found none ready
	Waited   int64 // of the misses, those handed a warm sandbox whose launch was in flight
	Retired  int64 // warm sandboxes removed unused: dead stream, too old
	// Halted is true while the pool does not refill because sandboxes do
	// not start (Executor.StartErr says why); it resumes once one does.
	Halted bool
}

// PoolStats returns the counters of the warm pool; zero without one.
func (e *Executor) PoolStats() PoolStats {
	if e.pool == nil {
		return PoolStats{}
	}
	p := e.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stats
	st.Size, st.Max = p.size, p.max
	for _, n := range p.target {
		st.Size = max(st.Size, n)
	}
	for _, q := range p.idle {
		st.Idle += len(q)
	}
	return st
}

// WarmPool is the pool as a worker's heartbeat reports it (see
// internal/worker's PoolReporter); nil without a pool.
func (e *Executor) WarmPool() *jobs.PoolStatus {
	tmpl := e.templateIdle()
	if e.pool == nil && tmpl == 0 {
		return nil
	}
	st := e.PoolStats()
	return &jobs.PoolStatus{Size: st.Size, Idle: st.Idle, Hits: st.Hits, Misses: st.Misses, Halted: st.Halted, Templates: tmpl}
}

// pool keeps up to size started, single-use sandboxes per preset image, all
// with the executor's default limits. One filler goroutine decides when to
// launch; each launch runs in a goroutine of its own, so refilling after a
// burst is as parallel as the pool is large. All of them belong to wg,
// which close waits for.
type pool struct {
	e      *Executor
	size   int // the floor of each image's target, and the most launches at once
	max    int // the ceiling of each image's target
	images []string
	lim    limits.Limits // what every warm sandbox is launched with

	ctx    context.Context // canceled by close: stops the filler
	cancel context.CancelFunc
	kick   chan struct{} // a sandbox was taken or launched: reconsider
	reset  chan struct{} // the engine answers again: end the back-off
	result chan error    // one per finished launch, read by the filler
	wg     sync.WaitGroup

	mu        sync.Mutex
	idle      map[string][]*sandbox // per image, oldest first
	launching map[string]int
	waiters   map[string][]chan *sandbox // per image: missed jobs waiting for a launch in flight
	target    map[string]int             // per image: size, grown by pressure
	pressed   map[string]time.Time       // per image: the last miss or drain
	filled    map[string]bool            // per image: the pool has reached its target once
	waiting   bool                       // the last launchMissing found the start gate closed
	closed    bool
	stats     PoolStats
}

func newPool(e *Executor) *pool {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pool{
		e: e, size: e.cfg.Pool, max: max(e.cfg.PoolMax, e.cfg.Pool), images: e.images, lim: e.cfg.Defaults,
		ctx: ctx, cancel: cancel,
		kick:      make(chan struct{}, 1),
		reset:     make(chan struct{}, 1),
		result:    make(chan error, e.cfg.Pool*len(e.images)),
		idle:      map[string][]*sandbox{},
		launching: map[string]int{},
		waiters:   map[string][]chan *sandbox{},
		target:    map[string]int{},
		pressed:   map[string]time.Time{},
		filled:    map[string]bool{},
	}
	p.initTargets()
	p.wg.Add(1)
	go p.fill()
	return p
}

// initTargets sets each image's first target: size, but 0 for an optional
// image (the languages'), which is pooled from its first job on, so that a
// worker that only ever runs Python keeps no idle compilers' sandboxes.
func (p *pool) initTargets() {
	for _, img := range p.images {
		p.target[img] = p.size
		if p.e.optional[img] {
			p.target[img], p.filled[img] = 0, true
		}
	}
}

// fits reports whether a job with these resolved limits can run in a warm
// sandbox. The timeout is the executor's timer, not part of the container,
// so it may differ; everything the container is configured with may not.
func (p *pool) fits(l limits.Limits) bool {
	l.Timeout = p.lim.Timeout
	return l == p.lim
}

// take hands out the oldest live warm sandbox of image, or nil. A sandbox
// taken is the caller's: it is never returned to the pool.
func (p *pool) take(image string) *sandbox {
	var dead []*sandbox
	defer func() {
		for _, s := range dead {
			p.e.release(p.ctx, p.e.cfg.Logger, s)
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	// No refill now: launching competes with this job for the engine and
	// the CPU. Its release kicks the filler (and the sweep would anyway).
	for q := p.idle[image]; len(q) > 0; q = p.idle[image] {
		s := q[0]
		p.idle[image] = q[1:]
		if s.alive() && time.Since(s.born) < p.e.cfg.PoolMaxAge {
			p.stats.Hits++
			s.pool = p
			if len(p.idle[image]) == 0 {
				p.grow(image, p.target[image]+1) // drained: the next job may miss
			}
			return s
		}
		dead = append(dead, s)
		p.stats.Retired++
	}
	p.stats.Misses++
	if p.target[image] == 0 {
		p.grow(image, p.size) // an optional image's first job
	} else {
		p.grow(image, 2*p.target[image])
	}
	notify(p.kick)
	return nil
}

// await is take for a job that found the pool empty: when a launch of
// image is in flight that no other job waits for, the job waits for it
// rather than launching a container of its own, which would start no
// sooner and would compete with it for the engine. It returns nil when
// there is none to wait for, the launch failed, or ctx ended first.
func (p *pool) await(ctx context.Context, image string) *sandbox {
	p.mu.Lock()
	if p.closed || p.launching[image] <= len(p.waiters[image]) {
		p.mu.Unlock()
		return nil
	}
	ch := make(chan *sandbox, 1)
	p.waiters[image] = append(p.waiters[image], ch)
	p.mu.Unlock()
	select {
	case s := <-ch:
		return s
	case <-ctx.Done():
	}
	p.mu.Lock()
	if i := slices.Index(p.waiters[image], ch); i >= 0 {
		p.waiters[image] = slices.Delete(p.waiters[image], i, i+1)
		p.mu.Unlock()
		return nil
	}
	// Handed over as ctx ended: unused, it goes back to the pool, or is
	// removed when the pool has closed meanwhile.
	s := <-ch
	closed := p.closed
	if s != nil && !closed {
		s.pool = nil
		p.idle[image] = append(p.idle[image], s)
	}
	p.mu.Unlock()
	if s != nil && closed {
		p.e.release(context.Background(), p.e.cfg.Logger, s)
	}
	return nil
}

// handOver gives what a launch of image made (nil: it failed) to the
// first job waiting for one, and reports whether there was one. p.mu is
// held.
func (p *pool) handOver(image string, s *sandbox) bool {
	q := p.waiters[image]
	if len(q) == 0 {
		return false
	}
	p.waiters[image] = q[1:]
	if s != nil {
		p.stats.Waited++
		s.pool = p
	}
	q[0] <- s
	return true
}

// grow raises image's target to n, within the pool's ceiling, and notes
// the pressure that asked for it. p.mu is held.
func (p *pool) grow(image string, n int) {
	if _, ok := p.target[image]; !ok || !p.filled[image] {
		return // not one of the pool's images, or still filling at start
	}
	p.pressed[image] = time.Now()
	if n = min(n, p.max); n > p.target[image] {
		p.target[image] = n
	}
}

// shrink lowers each calm image's target by one towards size, and returns
// an idle sandbox of each image that holds more than its target, the
// oldest, for the caller to remove. p.mu is held.
func (p *pool) shrink() []*sandbox {
	var out []*sandbox
	for img, n := range p.target {
		if n > p.size && time.Since(p.pressed[img]) > poolCalm {
			p.target[img] = n - 1
		}
		if q := p.idle[img]; len(q) > 0 && len(q)+p.launching[img] > p.target[img] {
			out = append(out, q[0])
			p.idle[img] = q[1:]
			p.stats.Retired++
		}
	}
	return out
}

// done is called when a sandbox taken from the pool was released: the
// time to launch its successor.
func (p *pool) done() { notify(p.kick) }

// retryNow ends a launch back-off (Check saw the engine answer).
func (p *pool) retryNow() { notify(p.reset) }

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// fill keeps every image's pool topped up. After a failed launch it stops
// launching for an exponentially growing pause (so a dead engine costs a
// call every few seconds, not a spin), until a launch succeeds or Check
// reports the engine back. It launches only what the start gate lets it:
// nothing while sandboxes fail to start (Check and jobs make the attempts
// that find out when they start again), and one at a time before the
// first one started.
func (p *pool) fill() {
	defer p.wg.Done()
	bo := retry.Policy{Initial: 250 * time.Millisecond, Max: 30 * time.Second}.New()
	var pause *time.Timer
	paused := func() bool { return pause != nil }
	resume := func() {
		if pause != nil {
			pause.Stop()
			pause = nil
		}
	}
	defer resume()
	sweep := time.NewTicker(poolSweep)
	defer sweep.Stop()
	for {
		var gate <-chan struct{}
		if !paused() {
			gate = p.launchMissing()
		}
		var pauseC <-chan time.Time
		if pause != nil {
			pauseC = pause.C
		}
		select {
		case <-p.ctx.Done():
			return
		case <-gate:
			resume()
			bo.Reset()
		case <-p.kick:
		case <-sweep.C:
			p.retire()
		case <-pauseC:
			pause = nil
		case <-p.reset:
			resume()
			bo.Reset()
		case err := <-p.result:
			if err == nil {
				bo.Reset()
			} else if errors.Is(err, ErrSandboxStart) {
				// The start gate paces what follows, not this back-off.
			} else if !paused() {
				d := bo.NextBackOff()
				p.e.cfg.Logger.Warn("warm pool: launching a sandbox failed; backing off",
					"worker", p.e.cfg.WorkerID, "retry_in", d.Round(time.Millisecond), "error", err)
				pause = time.NewTimer(d)
			}
		}
	}
}

// launchMissing starts a launch for every sandbox the pool lacks, or for
// one of them when that is the start gate's trial. When the gate holds
// launches back it returns what to wait for before asking again: the end
// of the trial in flight, or sandboxes starting again.
func (p *pool) launchMissing() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	var missing []string
	for _, img := range p.images {
		if p.e.optional[img] && !p.e.known(img) {
			continue // not on this host, as far as Check last saw
		}
		// Up to the target, at most size launches of the image at once:
		// the next ones start as these end.
		for n, l := len(p.idle[img])+p.launching[img], p.launching[img]; n < p.target[img] && l < p.size; n, l = n+1, l+1 {
			missing = append(missing, img)
		}
	}
	if len(missing) == 0 {
		// Halted while short, then shrunk to what it holds (a calm sweep):
		// nothing is missing, and no launch would clear the flag once
		// sandboxes start again.
		if p.waiting && p.e.starts.err() == nil {
			p.waiting, p.stats.Halted = false, false
		}
		return nil
	}
	turn, trialEnd, err := p.e.starts.turn(false)
	switch turn {
	case turnTrial:
		missing = missing[:1]
	case turnBusy, turnDenied:
		if err != nil && !p.waiting {
			p.e.cfg.Logger.Warn("warm pool: not refilling while sandboxes do not start",
				"worker", p.e.cfg.WorkerID, "missing", len(missing), "error", err)
		}
		p.waiting = err != nil
		p.stats.Halted = p.waiting
		if turn == turnBusy {
			return trialEnd
		}
		return p.e.starts.whenWorking()
	}
	if p.waiting {
		p.e.cfg.Logger.Info("warm pool: refilling", "worker", p.e.cfg.WorkerID, "missing", len(missing))
	}
	p.waiting, p.stats.Halted = false, false
	for _, img := range missing {
		p.launching[img]++
		p.wg.Add(1)
		go p.launch(img, turn == turnTrial)
	}
	return nil
}

func (p *pool) launch(image string, trial bool) {
	defer p.wg.Done()
	// Not tied to Close: a create canceled half-way could leave a container
	// the pool never learns about. The engine's deadlines bound it.
	ctx := context.Background()
	s, err := p.e.startSandbox(ctx, trial, image, "", p.lim)
	p.mu.Lock()
	p.launching[image]--
	p.stats.Launches++
	closed := p.closed
	switch {
	case err != nil:
		p.stats.Failures++
		p.handOver(image, nil)
	case closed:
		p.handOver(image, nil)
	case !p.handOver(image, s):
		p.idle[image] = append(p.idle[image], s)
		if len(p.idle[image]) >= p.target[image] {
			p.filled[image] = true
		}
	}
	p.mu.Unlock()
	if err == nil && closed {
		p.e.release(ctx, p.e.cfg.Logger, s)
	}
	select {
	case p.result <- err:
	case <-p.ctx.Done(): // the filler is gone
	}
}

// retire removes idle sandboxes whose stream ended (the container died or
// the connection broke) or that are older than PoolMaxAge.
func (p *pool) retire() {
	var old []*sandbox
	p.mu.Lock()
	for img, q := range p.idle {
		keep := q[:0]
		for _, s := range q {
			if s.alive() && time.Since(s.born) < p.e.cfg.PoolMaxAge {
				keep = append(keep, s)
			} else {
				old = append(old, s)
			}
		}
		clear(q[len(keep):])
		p.idle[img] = keep
	}
	p.stats.Retired += int64(len(old))
	old = append(old, p.shrink()...)
	p.mu.Unlock()
	for _, s := range old {
		p.e.release(p.ctx, p.e.cfg.Logger, s)
	}
}

// close stops the filler, waits for every launch in flight, and removes
// every idle sandbox.
func (p *pool) close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()

	p.mu.Lock()
	var all []*sandbox
	for img, q := range p.idle {
		all = append(all, q...)
		delete(p.idle, img)
	}
	p.mu.Unlock()
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, s := range all {
		wg.Go(func() {
			s.att.Close()
			<-s.copyDone
			s.stopWait()
			errs[i] = p.e.remove(context.Background(), s)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return infraErr("removing the warm pool", err)
	}
	return nil
}
