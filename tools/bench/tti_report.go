package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// The field's published time to interactive (remote, over the internet),
// printed beside (t)'s table for scale.
const ttiPublished = "published (remote, over the internet): Daytona median 0.11 s / p95 0.28 s / p99 0.29 s; E2B 0.44 / 0.85 / 0.99 s; others 1-2.7 s"

// ttiStats are one series' figures in the field's format.
type ttiStats struct{ min, median, p95, p99 time.Duration }

func (s *ttiSeries) stats() ttiStats {
	if len(s.ok) == 0 {
		return ttiStats{}
	}
	return ttiStats{min: slices.Min(s.ok), median: pct(s.ok, .5), p95: pct(s.ok, .95), p99: pct(s.ok, .99)}
}

// baseline is the mode's last side: the container by hand.
func (k *ttiKind) baseline(mode string) *ttiSeries {
	ss := k.series[mode]
	return ss[len(ss)-1]
}

func secs(d time.Duration) string { return fmt.Sprintf("%.3f s", d.Seconds()) }

func (f *ttiFigures) print(w io.Writer) {
	if f == nil {
		return
	}
	fmt.Fprintf(w, "\n(t) time to interactive, the field's format: %d per mode and contender; one worker (%s: its default --slots = cores, --pool = slots, --sessions 16) over its HTTP API\n",
		f.n, f.workerArgs)
	fmt.Fprintf(w, "    %d cores, load average %s at start, %s at end, %s in all; staggered: started %s apart\n",
		f.cores, f.load[0], f.load[1], f.took.Round(time.Second), f.o.gap)
	for _, k := range f.kinds {
		f.printKind(w, k)
	}
	fmt.Fprintf(w, "    %s\n", ttiPublished)
	f.printTargets(w)
}

func (f *ttiFigures) printKind(w io.Writer, k *ttiKind) {
	what := "submit → the result of python print(1) (POST /v1/jobs?wait=60s)"
	if k.name == "sessions" {
		what = "create → the first exec's result (POST /v1/sessions, POST .../exec true; deleted after)"
	}
	fmt.Fprintf(w, "\n  %s: %s\n", k.name, what)
	row := "  %-11s %-34s %9s %9s %9s %9s %8s %9s %7s\n"
	fmt.Fprintf(w, row, "mode", "contender", "min", "median", "p95", "p99", "success", "median ×", "p99 ×")
	for _, mode := range ttiModes {
		base := k.baseline(mode).stats()
		for _, s := range k.series[mode] {
			st := s.stats()
			rm, rp := "", ""
			if s != k.baseline(mode) {
				rm, rp = fmt.Sprintf("%.2f×", ratio(st.median, base.median)), fmt.Sprintf("%.2f×", ratio(st.p99, base.p99))
			}
			fmt.Fprintf(w, row, mode, s.side, secs(st.min), secs(st.median), secs(st.p95), secs(st.p99),
				fmt.Sprintf("%.0f%%", 100*s.success()), rm, rp)
			if s.fails > 0 {
				fmt.Fprintf(w, "  %-11s %-34s %d of %d failed (in %s at the median), the first: %s\n", "", "", s.fails, s.tries(), secs(pct(s.failed, .5)), s.firstErr)
			}
		}
	}
	if k.name == "jobs" && f.ceilRate > 0 {
		seq := k.series["sequential"][0]
		burst := k.series["burst"][0]
		fmt.Fprintf(w, "  the engine's ceiling in this run: %.1f containers/s (%d hardened /bin/true, 4 at once, half before the jobs, half after); sandfleet's sequential stream %.1f jobs/s (%.2f×); its burst of %d took %s, %s at the ceiling (%.2f×)\n",
			f.ceilRate, f.ceilN, f.seqRate(seq), f.seqRate(seq)/f.ceilRate, f.n, secs(burst.wall), secs(f.ceilWall()), ratio(burst.wall, f.ceilWall()))
	}
}

// seqRate is a sequential series' jobs per second of its wall time.
func (f *ttiFigures) seqRate(s *ttiSeries) float64 {
	if s.wall <= 0 {
		return 0
	}
	return float64(len(s.ok)) / s.wall.Seconds()
}

// ceilWall is how long N containers take at the engine's ceiling.
func (f *ttiFigures) ceilWall() time.Duration {
	if f.ceilRate <= 0 {
		return 0
	}
	return time.Duration(float64(f.n) / f.ceilRate * float64(time.Second))
}

func (f *ttiFigures) printTargets(w io.Writer) {
	fmt.Fprintf(w, "\n  %-52s %-14s %-12s %s\n", "target (ratios in this run)", "measured", "goal", "")
	line := func(name, measured, goal string, met bool, note string) {
		v := "MISSED"
		if met {
			v = "met"
		}
		fmt.Fprintf(w, "  %-52s %-14s %-12s %s%s\n", name, measured, goal, v, note)
	}
	for _, k := range f.kinds {
		ours := k.series["sequential"][0].side
		for _, mode := range ttiModes {
			s, base := k.get(mode, ours).stats(), k.baseline(mode)
			bs := base.stats()
			rm, rp := ratio(s.median, bs.median), ratio(s.p99, bs.p99)
			switch {
			case k.name == "jobs" && mode == "burst":
				if f.ceilRate > 0 {
					r := ratio(k.get(mode, ours).wall, f.ceilWall())
					line("jobs burst: wall time / N at the engine's ceiling", fmt.Sprintf("%.2f×", r), "≤ 1.10×", r <= 1.1, "")
				}
			case k.name == "jobs":
				// A sequential stream that outruns the engine is bound by it:
				// then its rate against the engine's ceiling is the target.
				engine, note := false, ""
				if rate := f.seqRate(k.get(mode, ours)); mode == "sequential" && f.ceilRate > 0 {
					engine = rate >= 0.9*f.ceilRate
					note = fmt.Sprintf(" (its rate %.2f× the engine's ceiling)", rate/f.ceilRate)
					if engine && (rm > 0.25 || rp > 0.6) {
						note = fmt.Sprintf(" by the engine's bound: its rate %.2f× the ceiling, ≥ 0.90×", rate/f.ceilRate)
					}
				}
				line(fmt.Sprintf("jobs %s median / %s", mode, base.side), fmt.Sprintf("%.2f×", rm), "≤ 0.25×", rm <= 0.25 || engine, note)
				line(fmt.Sprintf("jobs %s p99 / %s", mode, base.side), fmt.Sprintf("%.2f×", rp), "≤ 0.60×", rp <= 0.6 || engine, note)
			default:
				line(fmt.Sprintf("sessions %s median / docker run -d + exec", mode), fmt.Sprintf("%.3f×", rm), "≤ 0.05×", rm <= 0.05, "")
				line(fmt.Sprintf("sessions %s p99 / docker run -d + exec", mode), fmt.Sprintf("%.3f×", rp), "≤ 0.15×", rp <= 0.15, "")
				if mode != "burst" {
					quiet := " (a quiet machine's goal; this one's load is above)"
					line(fmt.Sprintf("sessions %s median, absolute", mode), secs(s.median), "≤ 0.015 s", s.median <= 15*time.Millisecond, quiet)
					line(fmt.Sprintf("sessions %s p99, absolute", mode), secs(s.p99), "≤ 0.060 s", s.p99 <= 60*time.Millisecond, quiet)
				}
			}
		}
		var lost []string
		for _, mode := range ttiModes {
			for _, s := range k.series[mode] {
				if s.fails > 0 && strings.HasPrefix(s.side, "sandfleet") {
					lost = append(lost, fmt.Sprintf("%s %s %d", mode, s.side, s.fails))
				}
			}
		}
		note := ""
		if len(lost) > 0 {
			note = " (failed: " + strings.Join(lost, ", ") + ")"
		}
		line(k.name+": success in every mode", fmt.Sprintf("%d failed", countFails(k)), "100 %", len(lost) == 0, note)
	}
}

func countFails(k *ttiKind) int {
	n := 0
	for _, ss := range k.series {
		for _, s := range ss {
			if strings.HasPrefix(s.side, "sandfleet") {
				n += s.fails
			}
		}
	}
	return n
}
