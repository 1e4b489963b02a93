package main

import (
	"testing"
	"time"
)

// hour builds an hour's samples at a minute each: live heap and RSS from
// heap(minute), 42 jobs a minute, the quick p50 from p50(minute).
func hour(heap func(m int) float64, p50 func(m int) time.Duration) []sample {
	const mib = 1 << 20
	idle := sample{label: "start", goroutines: 120, fds: 40, containers: map[string]int{"running": 4}}
	out := []sample{idle}
	for m := 1; m <= 60; m++ {
		out = append(out, sample{at: time.Duration(m) * time.Minute, jobs: 42 * m, rss: 30*mib + heap(m), live: heap(m),
			job: [2]time.Duration{p50(m), 2 * p50(m)}})
	}
	end := idle
	end.label = "idle"
	return append(out, end)
}

func TestCriteria(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	flat := func(int) time.Duration { return 40 * time.Millisecond }
	o := options{duration: time.Hour}
	tests := []struct {
		name    string
		samples []sample
		missed  []string
	}{
		{"a cache that fills in ten minutes, then stays", hour(func(m int) float64 { return float64(min(m, 10)) * 2 * mib }, flat), nil},
		{"a cache at its bound, with noise", hour(func(m int) float64 { return 20*mib + float64(m%3)*mib }, flat), nil},
		{"a cache at its bound, a GC spike late", hour(func(m int) float64 { return 20*mib + float64(m/58)*20*mib }, flat), nil},
		{"11 KB a job, as the issue saw",
			hour(func(m int) float64 { return float64(42*m) * float64(11<<10) }, flat),
			[]string{"RSS levels off (last third's median vs the middle third's)", "live heap levels off (last third's median vs the middle third's)"}},
		{"6 KB a job",
			hour(func(m int) float64 { return 10*mib + float64(42*m)*float64(6<<10) }, flat),
			[]string{"RSS levels off (last third's median vs the middle third's)", "live heap levels off (last third's median vs the middle third's)"}},
		{"latency doubling", hour(func(int) float64 { return 20 * mib }, func(m int) time.Duration { return time.Duration(40+m) * time.Millisecond }),
			[]string{"quick job p50, last interval vs the first after warm-up"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var missed []string
			for _, c := range criteria(o, tc.samples, 0) {
				if !c.judged {
					t.Errorf("%s not judged: %s", c.name, c.value)
				}
				if c.judged && !c.met {
					missed = append(missed, c.name)
				}
			}
			if len(missed) != len(tc.missed) {
				t.Fatalf("missed %q, want %q", missed, tc.missed)
			}
			for i := range missed {
				if missed[i] != tc.missed[i] {
					t.Fatalf("missed %q, want %q", missed, tc.missed)
				}
			}
		})
	}
}

// Back at idle means every one of goroutines, fds, containers and
// networks; a grown pool is not idle yet.
func TestIdleMisses(t *testing.T) {
	t.Parallel()
	base := sample{goroutines: 120, fds: 40, containers: map[string]int{"running": 4}}
	now := base
	if m := idleMisses(base, now); len(m) != 0 {
		t.Fatalf("the same sample: %q", m)
	}
	now.goroutines, now.containers = 471, map[string]int{"running": 9, "removing": 1}
	if m := idleMisses(base, now); len(m) != 2 {
		t.Fatalf("goroutines and containers not back: %q", m)
	}
}
