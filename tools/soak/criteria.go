package main

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// The criteria a soak must meet. The warm-up is the run's first fifth:
// pools filling, the store's first blocks, the runtime sizing its heap.
//
// Levelling off: the median RSS (and live heap) of the run's last third
// may exceed the median of its middle third by at most 5 % or 4 MiB,
// whichever is more. A cache bounded by a limit reaches its bound before
// the middle third and passes; memory that grows with every job grows by
// (bytes a job) × (jobs in a third) between the two, so an hour at 0.7
// jobs/s (840 jobs a third) fails any leak of more than about 5 KB a job.
// Medians, not maxima: both curves saw-tooth with the GC and the
// scavenger (one sample 20 MiB over its neighbours), and a spike moves a
// maximum but not a median, while a leak moves both alike. The table
// prints what the bound allows a job.
//
// At idle: once the load has stopped and every job has ended, goroutines
// come back within idleGoroutines of their value before the load, fds
// within idleFDs, the worker's containers to the warm pool alone
// (running, no more than before), its egress networks to the same count,
// and no fd of an unlinked file is held.
//
// Latency: the quick jobs' p50 in the last interval within 1.2× of the
// first interval after the warm-up. The machine may be shared: the load
// average is printed at the start and the end, and a miss on a busy
// machine says more about the machine than about the worker.
const (
	warmUp          = 0.2
	levelFraction   = 0.05
	levelFloor      = 4 << 20
	latencyFactor   = 1.2
	idleGoroutines  = 10
	idleFDs         = 5
	minLevelSamples = 2
)

// criterion is one line of the verdict.
type criterion struct {
	name, value, bound string
	met                bool
	judged             bool // false: too short a run to say
}

func (c criterion) verdict() string {
	switch {
	case !c.judged:
		return "not judged"
	case c.met:
		return "met"
	}
	return "MISSED"
}

func countMissed(cs []criterion) int {
	n := 0
	for _, c := range cs {
		if c.judged && !c.met {
			n++
		}
	}
	return n
}

func printCriteria(w io.Writer, cs []criterion) {
	fmt.Fprintln(w, "| criterion | value | bound | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, c := range cs {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", c.name, c.value, c.bound, c.verdict())
	}
}

// criteria judges a run: samples are the one before the load ("start"),
// those under load, and the one at idle after it ("idle").
func criteria(o options, samples []sample, problems int) []criterion {
	base, idle := samples[0], samples[len(samples)-1]
	var mid, last, load []sample
	for _, s := range samples[1 : len(samples)-1] {
		load = append(load, s)
		switch {
		case s.at > o.duration*2/3:
			last = append(last, s)
		case s.at > o.duration/3:
			mid = append(mid, s)
		}
	}
	perThird := float64(load[len(load)-1].jobs) / 3
	cs := []criterion{
		level("RSS levels off (last third's median vs the middle third's)", mid, last, perThird, func(s sample) float64 { return s.rss }),
		level("live heap levels off (last third's median vs the middle third's)", mid, last, perThird, func(s sample) float64 { return s.live }),
	}
	cs = append(cs, idleChecks(base, idle)...)
	cs = append(cs, latency(o, load),
		criterion{name: "no container the engine could not remove, at the end", value: fmt.Sprint(idle.unremov), bound: "0",
			met: idle.unremov == 0, judged: true},
		criterion{name: "every job accounted for, every session's state, nothing left after the stop", value: fmt.Sprintf("%d problems", problems),
			bound: "0", met: problems == 0, judged: true})
	return cs
}

func level(name string, mid, last []sample, jobsPerThird float64, f func(sample) float64) criterion {
	c := criterion{name: name}
	if len(mid) < minLevelSamples || len(last) < minLevelSamples {
		c.value = fmt.Sprintf("%d and %d samples", len(mid), len(last))
		c.bound = fmt.Sprintf("%d samples a third", minLevelSamples)
		return c
	}
	median := func(ss []sample) float64 {
		v := make([]float64, len(ss))
		for i, s := range ss {
			v[i] = f(s)
		}
		slices.Sort(v)
		return (v[(len(v)-1)/2] + v[len(v)/2]) / 2
	}
	m, l := median(mid), median(last)
	slack := max(levelFraction*m, levelFloor)
	c.judged, c.met = true, l <= m+slack
	c.value = fmt.Sprintf("%s → %s MiB", mib(m), mib(l))
	c.bound = fmt.Sprintf("≤ %s MiB (+%s MiB: %.1f KiB a job over %.0f jobs)", mib(m+slack), mib(slack), slack/1024/max(jobsPerThird, 1), jobsPerThird)
	return c
}

// idleMisses says what of s is not back at base's idle values.
func idleMisses(base, s sample) []string {
	var out []string
	for _, c := range idleChecks(base, s) {
		if !c.met {
			out = append(out, c.name)
		}
	}
	return out
}

func idleChecks(base, s sample) []criterion {
	return []criterion{
		{name: "goroutines back at idle", value: fmt.Sprintf("%.0f → %.0f", base.goroutines, s.goroutines),
			bound: fmt.Sprintf("≤ %.0f", base.goroutines+idleGoroutines), met: s.goroutines <= base.goroutines+idleGoroutines, judged: true},
		{name: "fds back at idle", value: fmt.Sprintf("%.0f → %.0f", base.fds, s.fds),
			bound: fmt.Sprintf("≤ %.0f", base.fds+idleFDs), met: s.fds <= base.fds+idleFDs, judged: true},
		{name: "containers back at idle (the warm pool alone)", value: states(base.containers) + " → " + states(s.containers),
			bound: fmt.Sprintf("running ≤ %d, no other state", base.containers["running"]), met: poolAlone(base, s), judged: true},
		{name: "egress networks back at idle", value: fmt.Sprintf("%d → %d", base.networks, s.networks),
			bound: "the same", met: base.networks == s.networks, judged: true},
		{name: "fds of unlinked files at idle", value: fmt.Sprint(s.deleted), bound: "0", met: s.deleted == 0, judged: true},
	}
}

// poolAlone reports whether s's containers are running ones alone, no
// more than base's: the warm pool, shrunk back to its size after the load
// (it may have grown while base's one-of-each ran); a sandbox not removed
// is exited, created, dead or removing, or one too many.
func poolAlone(base, s sample) bool {
	for st := range s.containers {
		if st != "running" {
			return false
		}
	}
	return s.containers["running"] <= base.containers["running"]
}

// latency compares the quick jobs' p50 in the first interval after the
// warm-up with the last interval's.
func latency(o options, load []sample) criterion {
	c := criterion{name: "quick job p50, last interval vs the first after warm-up", bound: fmt.Sprintf("≤ %.1f×", latencyFactor)}
	var first, last *sample
	for i := range load {
		s := &load[i]
		if s.job[0] == 0 {
			continue
		}
		if first == nil && s.at > time.Duration(warmUp*float64(o.duration)) {
			first = s
		}
		last = s
	}
	if first == nil || last == first {
		c.value = "no two intervals after the warm-up"
		return c
	}
	r := float64(last.job[0]) / float64(first.job[0])
	c.value = fmt.Sprintf("%s → %s ms (%.2f×)", ms(first.job[0]), ms(last.job[0]), r)
	c.judged, c.met = true, r <= latencyFactor
	return c
}
