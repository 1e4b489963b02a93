package executor

import (
	"context"
	"sync"
	"time"

	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/templates"
)

// templatePool keeps a template's own warm sandboxes: Pool of them, each
// launched with the template's default limits and prepared (its start
// command run, its ready check passed) before it is idle, so a job that
// takes one starts at once. It refills on its own after each take,
// whatever the presets' pool does, and sizes itself as that pool does:
// its target doubles on a miss and grows by one when a take drains it, up
// to PoolMax, and after poolCalm without either it shrinks by one a sweep
// back to Pool. A new version of the template gets a new pool; the old
// one is closed.
type templatePool struct {
	e   *Executor
	t   *templates.Template
	lim limits.Limits

	ctx    context.Context // canceled by close: launches in flight end
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	idle      []*sandbox // prepared, oldest first
	launching int
	target    int       // Pool, grown up to max under pressure
	pressed   time.Time // the last miss or drain
	closed    bool
}

// max is the most the pool grows to: PoolMax, or Pool without one.
func (tp *templatePool) max() int { return max(tp.t.Pool, tp.t.PoolMax) }

func newTemplatePool(e *Executor, t *templates.Template) *templatePool {
	def, _ := e.templateLimits(t)
	ctx, cancel := context.WithCancel(context.Background())
	tp := &templatePool{e: e, t: t, lim: def, ctx: ctx, cancel: cancel, target: t.Pool}
	tp.refill()
	if tp.max() > tp.t.Pool {
		tp.wg.Go(tp.sweep)
	}
	return tp
}

// fits reports whether a job's limits are the pool's (its timeout may
// differ: the timer is the executor's).
func (tp *templatePool) fits(l limits.Limits) bool {
	l.Timeout = tp.lim.Timeout
	return l == tp.lim
}

// take hands out the oldest live prepared sandbox, or nil, and refills.
func (tp *templatePool) take() *sandbox {
	var dead []*sandbox
	tp.mu.Lock()
	var s *sandbox
	for len(tp.idle) > 0 && s == nil {
		c := tp.idle[0]
		tp.idle = tp.idle[1:]
		if c.alive() && time.Since(c.born) < tp.e.cfg.PoolMaxAge {
			s = c
		} else {
			dead = append(dead, c)
		}
	}
	switch {
	case s == nil:
		tp.grow(2 * tp.target)
	case len(tp.idle) == 0:
		tp.grow(tp.target + 1) // drained: the next job may miss
	}
	tp.mu.Unlock()
	for _, d := range dead {
		tp.e.release(context.Background(), tp.e.cfg.Logger, d)
	}
	tp.refill()
	return s
}

// refill launches what the pool lacks, each launch in a goroutine of its
// own.
func (tp *templatePool) refill() {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	for !tp.closed && len(tp.idle)+tp.launching < tp.target {
		tp.launching++
		tp.wg.Add(1)
		go tp.launch()
	}
}

func (tp *templatePool) launch() {
	defer tp.wg.Done()
	log := tp.e.cfg.Logger.With("template", tp.t.Name, "version", tp.t.Version)
	s, err := tp.e.admit(tp.ctx, tp.t.Image, "", tp.lim)
	if err == nil {
		if err = tp.e.prepare(tp.ctx, s, tp.t, tp.lim); err != nil {
			tp.e.release(context.Background(), log, s)
		}
	}
	tp.mu.Lock()
	tp.launching--
	closed := tp.closed
	if err == nil && !closed {
		s.prepared = true
		tp.idle = append(tp.idle, s)
	}
	tp.mu.Unlock()
	switch {
	case err != nil && tp.ctx.Err() == nil:
		// Not again at once: a template whose ready check fails would
		// otherwise launch sandboxes in a loop. The next take refills.
		log.Warn("a warm sandbox of the template failed", "error", err)
	case err == nil && closed:
		tp.e.release(context.Background(), log, s)
	}
}

// grow raises the target to n, within max, and notes the pressure that
// asked for it. tp.mu is held.
func (tp *templatePool) grow(n int) {
	tp.pressed = time.Now()
	tp.target = max(tp.target, min(n, tp.max()))
}

// shrink lowers a calm pool's target by one towards Pool, and returns the
// oldest idle sandbox when the pool holds more than its target, for the
// caller to remove. tp.mu is held.
func (tp *templatePool) shrink() *sandbox {
	if tp.target > tp.t.Pool && time.Since(tp.pressed) > poolCalm {
		tp.target--
	}
	if len(tp.idle) > 0 && len(tp.idle)+tp.launching > tp.target {
		s := tp.idle[0]
		tp.idle = tp.idle[1:]
		return s
	}
	return nil
}

// sweep shrinks a pool that may grow, every poolSweep, until it closes.
func (tp *templatePool) sweep() {
	t := time.NewTicker(poolSweep)
	defer t.Stop()
	for {
		select {
		case <-tp.ctx.Done():
			return
		case <-t.C:
		}
		tp.mu.Lock()
		s := tp.shrink()
		tp.mu.Unlock()
		if s != nil {
			tp.e.release(context.Background(), tp.e.cfg.Logger, s)
		}
	}
}

// close stops the pool's launches and removes its idle sandboxes.
func (tp *templatePool) close() {
	tp.mu.Lock()
	tp.closed = true
	idle := tp.idle
	tp.idle = nil
	tp.mu.Unlock()
	tp.cancel()
	for _, s := range idle {
		tp.e.release(context.Background(), tp.e.cfg.Logger, s)
	}
	tp.wg.Wait()
}

// syncTemplatePools keeps a pool for each template that asks for one, at
// its current version. The templates' mutex is held.
func (e *Executor) syncTemplatePools() {
	if e.templates.pools == nil {
		e.templates.pools = map[string]*templatePool{}
	}
	for name, tp := range e.templates.pools {
		t := e.templates.m[name]
		if t == nil || t.Pool == 0 || t.Tenant != "" || t.Version != tp.t.Version || e.closed() {
			delete(e.templates.pools, name)
			go tp.close()
		}
	}
	if e.closed() {
		return
	}
	for name, t := range e.templates.m {
		// A tenant's template has no pool (templates.TenantPolicy).
		if t.Pool > 0 && t.Tenant == "" && e.templates.pools[name] == nil {
			e.templates.pools[name] = newTemplatePool(e, t)
		}
	}
}

// closed reports whether Close has begun.
func (e *Executor) closed() bool {
	select {
	case <-e.closing:
		return true
	default:
		return false
	}
}

// templateSandbox is a prepared sandbox of t's pool for a job of limits
// lim, or nil.
func (e *Executor) templateSandbox(t *templates.Template, lim limits.Limits) *sandbox {
	if t.Tenant != "" {
		return nil
	}
	e.templates.mu.RLock()
	tp := e.templates.pools[t.Name]
	e.templates.mu.RUnlock()
	if tp == nil || tp.t.Version != t.Version || !tp.fits(lim) {
		return nil
	}
	return tp.take()
}

// closeTemplatePools closes every template's pool (Close).
func (e *Executor) closeTemplatePools() {
	e.templates.mu.Lock()
	pools := e.templates.pools
	e.templates.pools = nil
	e.templates.mu.Unlock()
	var wg sync.WaitGroup
	for _, tp := range pools {
		wg.Go(tp.close)
	}
	wg.Wait()
}

// templateIdle is how many prepared sandboxes the templates' pools hold.
func (e *Executor) templateIdle() int {
	e.templates.mu.RLock()
	defer e.templates.mu.RUnlock()
	n := 0
	for _, tp := range e.templates.pools {
		tp.mu.Lock()
		n += len(tp.idle)
		tp.mu.Unlock()
	}
	return n
}
