package executor

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"
)

// The pool halts while sandboxes do not start; a calm sweep shrinks its
// target back to exactly what it holds; then sandboxes start again: the
// pool lacks nothing, and its next round clears Halted (it stayed, and
// sandfleet_pool_halted at 1, for as long as no job took a sandbox).
func TestPoolHaltedClearsWhenNothingIsMissing(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := &Executor{cfg: Config{PoolMaxAge: time.Hour, Logger: log, WorkerID: "w"},
		starts: newStartGate("runc", log, defaultStartTuning)}
	p := &pool{e: e, size: 1, max: 4, images: []string{"img"}, kick: make(chan struct{}, 1),
		idle: map[string][]*sandbox{}, launching: map[string]int{}, waiters: map[string][]chan *sandbox{},
		target: map[string]int{"img": 2}, pressed: map[string]time.Time{"img": time.Now()}, filled: map[string]bool{"img": true}}
	e.pool = p
	p.idle["img"] = []*sandbox{{born: time.Now(), copyDone: make(chan struct{})}} // one live idle sandbox, target 2

	e.starts.failed(false, errors.New("runtime not registered")) // sandboxes stop starting
	if gate := p.launchMissing(); gate == nil || !e.PoolStats().Halted {
		t.Fatalf("pool missing one sandbox while starts fail: gate %v, halted %v; want halted", gate, e.PoolStats().Halted)
	}
	// Calm while halted: the sweep shrinks the target 2 -> 1 == idle.
	p.pressed["img"] = time.Now().Add(-2 * poolCalm)
	p.retire()
	if p.target["img"] != 1 || len(p.idle["img"]) != 1 {
		t.Fatalf("target %d idle %d, want 1 and 1", p.target["img"], len(p.idle["img"]))
	}
	p.launchMissing() // the filler's next round after the sweep

	e.starts.started(false) // a job's fresh sandbox starts: sandboxes work again
	select {
	case <-e.starts.whenWorking():
	default:
		t.Fatal("gate not working")
	}
	p.launchMissing() // the filler's next round (sweep or kick)
	if st := e.PoolStats(); st.Halted {
		t.Fatalf("sandboxes start again and the pool lacks nothing, yet PoolStats().Halted = true (%+v)", st)
	}
}
