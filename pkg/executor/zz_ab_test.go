package executor

import (
	"slices"
	"testing"
	"time"
)

func TestZZAB(t *testing.T) {
	mk := func(img string) *Executor {
		return setup(t, func(c *Config) {
			c.Pool = 1
			p := DefaultPresets()["python"]
			p.Image = img
			c.Presets = map[string]Preset{"python": p}
		})
	}
	old, cur := mk("sandfleet/sandbox:pre-issue7"), mk(DefaultImage)
	var a, b []time.Duration
	for i := range 30 {
		for _, x := range []struct {
			e *Executor
			d *[]time.Duration
		}{{old, &a}, {cur, &b}} {
			_ = i
			waitIdle(t, x.e, 1, 0)
			t0 := time.Now()
			res := run(t, x.e, job("print(1)"))
			*x.d = append(*x.d, time.Since(t0))
			if res.Stdout != "1\n" {
				t.Fatalf("stdout %q", res.Stdout)
			}
			x.e.removing.Wait()
		}
	}
	slices.Sort(a)
	slices.Sort(b)
	t.Logf("pooled Run of print(1), 30 each, interleaved: exit path p50 %v p95 %v; trailer path p50 %v p95 %v",
		a[15].Round(time.Millisecond), a[28].Round(time.Millisecond), b[15].Round(time.Millisecond), b[28].Round(time.Millisecond))
}
