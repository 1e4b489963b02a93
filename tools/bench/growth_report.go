package main

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// print writes (u)'s tables.
func (f *growthFigures) print(w io.Writer) {
	if f == nil {
		return
	}
	fmt.Fprintf(w, "\n(u) how cost grows with work: %d cores, load average %s at start, %s at end, %s in all\n",
		f.cores, f.load[0], f.load[1], f.took.Round(time.Second))
	if len(f.jobs) > 0 {
		fmt.Fprintf(w, "\njobs: python %q over POST /v1/jobs?wait=, one worker: %s\n", f.code, f.jobArgs)
		f.latencyTable(w, "callers", f.jobs, true)
	}
	if len(f.idle)+len(f.exec) > 0 {
		fmt.Fprintf(w, "\nsessions: one worker: %s\n", f.sessArgs)
	}
	if len(f.idle) > 0 {
		memoryTable(w, "idle sessions", f.idle)
	}
	if len(f.exec) > 0 {
		fmt.Fprintf(w, "\nsession exec of true over POST /v1/sessions/{id}/exec, %d each, every session busy at once\n", f.o.execsPer)
		f.latencyTable(w, "busy sessions", f.exec, false)
	}
	if len(f.pools) > 0 {
		fmt.Fprintf(w, "\nworker memory with its warm pool full: --pool N --pool-max N, one worker each\n")
		memoryTable(w, "--pool", f.pools)
	}
	if len(f.store) > 0 {
		fmt.Fprintf(w, "\nbroker storage: the JetStream streams' bytes and messages after the work, less before, per unit\n")
		fmt.Fprintf(w, "%-28s %6s %12s %10s   %s\n", "per", "n", "bytes", "messages", "by stream (bytes, messages)")
		for _, d := range f.store {
			fmt.Fprintf(w, "%-28s %6d %12.0f %10.2f   %s\n", d.what, d.n, d.perBytes(), d.perMsgs(), d.byStream())
		}
	}
	for _, p := range f.plots {
		fmt.Fprintf(w, "wrote %s\n", p)
	}
}

func (f *growthFigures) latencyTable(w io.Writer, level string, ls []latencyLevel, cpu bool) {
	fmt.Fprintf(w, "%14s %6s %9s %9s %9s %11s %8s", level, "n", "p50", "p99", "max", "rate", "failed")
	if cpu {
		fmt.Fprintf(w, " %15s %11s", "worker CPU/job", "warm/cold")
	}
	fmt.Fprintln(w)
	for _, l := range ls {
		fmt.Fprintf(w, "%14d %6d %9s %9s %9s %9.1f/s %8d", l.level, len(l.ok)+l.fails,
			ms(pct(l.ok, .5)), ms(pct(l.ok, .99)), ms(pct(l.ok, 1)), l.rate(), l.fails)
		if cpu {
			per := time.Duration(0)
			if n := len(l.ok) + l.fails; n > 0 {
				per = l.cpu / time.Duration(n)
			}
			fmt.Fprintf(w, " %12.1f ms %11s", float64(per)/float64(time.Millisecond), fmt.Sprintf("%d/%d", l.warm, l.cold))
		}
		fmt.Fprintln(w)
		if l.firstErr != "" {
			fmt.Fprintf(w, "%14s first failure: %s\n", "", l.firstErr)
		}
	}
}

func memoryTable(w io.Writer, level string, ms []memoryLevel) {
	fmt.Fprintf(w, "%14s %10s %14s %14s\n", level, "RSS", "live heap", "heap per unit")
	for _, m := range ms {
		per := "-"
		if m.level > 0 && ms[0].level == 0 {
			per = fmt.Sprintf("%.0f KiB", (m.heap-ms[0].heap)/float64(m.level)/1024)
		}
		fmt.Fprintf(w, "%14d %6.1f MiB %10.1f MiB %14s\n", m.level, m.rss/(1<<20), m.heap/(1<<20), per)
	}
}

func (d storeDelta) perBytes() float64 { return per(d.bytes, d.n) }
func (d storeDelta) perMsgs() float64  { return per(d.msgs, d.n) }

func per(m map[string]int64, n int) float64 {
	if n == 0 {
		return 0
	}
	var sum int64
	for _, v := range m {
		sum += v
	}
	return float64(sum) / float64(n)
}

// byStream lists each stream's share per unit, the largest first.
func (d storeDelta) byStream() string {
	names := make([]string, 0, len(d.bytes))
	for name := range d.bytes {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return int(d.bytes[b] - d.bytes[a]) })
	s := ""
	for _, name := range names {
		if s != "" {
			s += "; "
		}
		s += fmt.Sprintf("%s %.0f, %.2f", name, float64(d.bytes[name])/float64(max(d.n, 1)), float64(d.msgs[name])/float64(max(d.n, 1)))
	}
	if s == "" {
		s = "(none)"
	}
	return s
}
