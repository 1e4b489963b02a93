package retry

import (
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
)

func TestPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		p    Policy
		// the un-jittered delays of the first attempts
		want   []time.Duration
		jitter float64
	}{
		{
			name:   "defaults: ×1.5, ±50%",
			p:      Policy{Initial: 100 * time.Millisecond, Max: 300 * time.Millisecond},
			want:   []time.Duration{100, 150, 225, 300, 300},
			jitter: 0.5,
		},
		{
			name:   "multiplier and jitter set",
			p:      Policy{Initial: time.Second, Max: 5 * time.Second, Multiplier: 2, Jitter: 0.1},
			want:   []time.Duration{1000, 2000, 4000, 5000, 5000},
			jitter: 0.1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := tc.p.New()
			for i, w := range tc.want {
				w *= time.Millisecond
				lo := time.Duration(float64(w) * (1 - tc.jitter))
				hi := time.Duration(float64(w) * (1 + tc.jitter))
				if d := b.NextBackOff(); d < lo || d > hi {
					t.Fatalf("delay %d = %s, want within [%s, %s]", i+1, d, lo, hi)
				}
			}
		})
	}
}

func TestPolicyNeverStops(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Unix(0, 0)}
	b := Policy{Initial: time.Millisecond, Max: time.Second}.New()
	b.Clock = clock
	b.Reset()
	for range 100 {
		clock.now = clock.now.Add(time.Hour) // far past backoff's default 15m limit
		if d := b.NextBackOff(); d == backoff.Stop {
			t.Fatal("the back-off gave up")
		}
	}
}

func TestFuncIsFresh(t *testing.T) {
	t.Parallel()
	f := Policy{Initial: time.Second, Max: time.Minute, Jitter: 0.01}.Func()
	a := f()
	for range 5 {
		a.NextBackOff()
	}
	if d := f().NextBackOff(); d > 2*time.Second {
		t.Fatalf("a second back-off starts at %s, not about 1s: it shares the first one's state", d)
	}
}

type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }
