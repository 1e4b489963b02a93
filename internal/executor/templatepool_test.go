package executor

import (
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/pkg/templates"
)

// A template's pool sizes itself as the presets' does: its target doubles
// on each miss and grows by one when a take drains it, up to pool_max;
// after poolCalm without either it shrinks by one a sweep back to pool,
// handing back the oldest idle sandbox beyond the target. (The pool is
// closed so that nothing is launched: the sizing is what is tested.)
func TestTemplatePoolSizesItself(t *testing.T) {
	t.Parallel()
	e := &Executor{cfg: Config{PoolMaxAge: time.Hour}}
	tp := &templatePool{e: e, t: &templates.Template{Name: "t", Pool: 2, PoolMax: 7}, target: 2, closed: true}
	for _, want := range []int{4, 7, 7} {
		if s := tp.take(); s != nil {
			t.Fatal("a sandbox from an empty pool")
		}
		if tp.target != want {
			t.Fatalf("target after a miss = %d, want %d", tp.target, want)
		}
	}
	live := func() *sandbox {
		return &sandbox{born: time.Now(), copyDone: make(chan struct{})} // copyDone open: alive
	}
	tp.target = 4
	tp.idle = []*sandbox{live()}
	if tp.take() == nil || tp.target != 5 {
		t.Fatalf("a drained pool: target %d, want 5", tp.target)
	}

	oldest := live()
	tp.idle = []*sandbox{oldest, live(), live(), live(), live(), live()}
	if s := tp.shrink(); s != oldest || tp.target != 5 {
		t.Fatalf("under pressure: the target must stay 5 (is %d) and the sixth idle sandbox go (went %v)", tp.target, s)
	}
	tp.pressed = time.Now().Add(-2 * poolCalm)
	for range 10 {
		tp.shrink()
	}
	if tp.target != 2 || len(tp.idle) != 2 {
		t.Fatalf("after calm sweeps: target %d, %d idle; want the floor, pool 2", tp.target, len(tp.idle))
	}

	// Without pool_max the pool does not grow.
	fixed := &templatePool{e: e, t: &templates.Template{Name: "f", Pool: 3}, target: 3, closed: true}
	if fixed.take(); fixed.target != 3 {
		t.Fatalf("a pool without pool_max grew to %d", fixed.target)
	}
}
