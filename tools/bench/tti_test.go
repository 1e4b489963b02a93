package main

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The three modes start their calls as the field's methodology says: one
// after another, a fixed interval apart, or all at once; failures are
// counted, not timed, and every call's clean-up runs.
func TestDriveModes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode    string
		gap     time.Duration
		minPeak int32 // calls in flight at once, at least
		maxPeak int32 // and at most
	}{
		{"sequential", 0, 1, 1},
		{"staggered", 40 * time.Millisecond, 1, 2}, // each call takes 30 ms < the gap
		{"burst", time.Hour, 10, 10},               // the gap is ignored
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			var inFlight, peak, calls, cleaned atomic.Int32
			var mu sync.Mutex
			var starts []time.Time
			// Every fifth call fails; the others hold 30 ms, or until
			// all ten are in flight in burst.
			all := make(chan struct{})
			side := ttiSide{name: "fake", do: func(ctx context.Context) (func(), error) {
				mu.Lock()
				starts = append(starts, time.Now())
				mu.Unlock()
				n := inFlight.Add(1)
				defer inFlight.Add(-1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				if c := calls.Add(1); c == 10 && tc.mode == "burst" {
					close(all)
				}
				if tc.mode == "burst" {
					<-all
				} else {
					time.Sleep(30 * time.Millisecond)
				}
				if calls.Load()%5 == 0 && tc.mode == "sequential" {
					return func() { cleaned.Add(1) }, errors.New("refused")
				}
				return func() { cleaned.Add(1) }, nil
			}}
			s := &ttiSeries{}
			before := time.Now()
			drive(context.Background(), tc.mode, 10, tc.gap, side, s)
			if s.tries() != 10 || cleaned.Load() != 10 {
				t.Fatalf("%d tries, %d cleaned; want 10 each", s.tries(), cleaned.Load())
			}
			if p := peak.Load(); p < tc.minPeak || p > tc.maxPeak {
				t.Errorf("%d calls in flight at once; want %d to %d", p, tc.minPeak, tc.maxPeak)
			}
			if tc.mode == "sequential" && (s.fails != 2 || s.firstErr != "refused" || len(s.ok) != 8) {
				t.Errorf("fails %d (%q), ok %d; want 2 failed, 8 timed", s.fails, s.firstErr, len(s.ok))
			}
			if tc.mode == "staggered" {
				// Call i is due i gaps after drive began, which is after
				// before: however late the first call started, none
				// starts before its time.
				for i := 1; i < len(starts); i++ {
					if d := starts[i].Sub(before); d < time.Duration(i)*tc.gap {
						t.Errorf("call %d started %s after drive began; want ≥ %s", i, d, time.Duration(i)*tc.gap)
					}
				}
			}
		})
	}
}
