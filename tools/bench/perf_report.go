package main

import (
	"fmt"
	"io"
	"time"
)

// The report of phases (i) to (n): their figures, then the targets.

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func (p *perf2) print(w io.Writer) {
	if p == nil {
		return
	}
	fmt.Fprintf(w, "\nPerformance II: phases (i)-(n), %s, load average %s at start, %s at end\n",
		p.took.Round(time.Second), p.load[0], p.load[1])
	fmt.Fprintf(w, "%-52s %10s %10s\n", "", "p50", "p95")
	row := func(name string, d []time.Duration) {
		if len(d) > 0 {
			fmt.Fprintf(w, "%-52s %10s %10s\n", name, ms(pct(d, .5)), ms(pct(d, .95)))
		}
	}
	row("(i)  the seed's sequence, Engine API, sequential", p.seqSeed)
	row("(i)  docker run --rm, hardened, sequential", p.seqDocker)
	row(fmt.Sprintf("(j)  sandfleet, default pool, %s think", p.o.think), p.agentFleet)
	row("     of which in the sandbox (duration_ms)", p.agentSandbox)
	row("     the job's own CPU (cpu_ms)", p.agentCPU)
	row(fmt.Sprintf("(j)  the seed's sequence, %s think", p.o.think), p.agentSeed)
	row(fmt.Sprintf("(j)  docker run --rm, %s think", p.o.think), p.agentDocker)
	if len(p.tput) > 0 {
		fmt.Fprintf(w, "(k)  %d at once, %d jobs each, in 2 rounds          %21s\n", p.o.conc, p.tput[0].jobs, "throughput")
		for _, c := range p.tput {
			fmt.Fprintf(w, "     %-47s %10.2f jobs/s\n", c.name, c.rate())
		}
	}
	if c := p.churn; len(c.total) > 0 {
		fmt.Fprintf(w, "(l)  engine churn per container, /bin/true, %d sequential: p50 create %s, start %s, wait %s, remove %s; total %s\n",
			len(c.total), ms(pct(c.create, .5)), ms(pct(c.start, .5)), ms(pct(c.wait, .5)), ms(pct(c.remove, .5)), ms(pct(c.total, .5)))
		fmt.Fprintf(w, "     engine CPU per container: its shim and runc %.0f ms (at least); dockerd and containerd %.0f ms, of which others' work (%.0f ms/s before) is part\n",
			msf(c.shimCPU), msf(c.daemonCPU), msf(c.idleCPU))
	}
	if l := p.levers; len(l.python) > 0 {
		py, sh := pct(l.python, .5), pct(l.shell, .5)
		fmt.Fprintf(w, "(m)  in a warm sandbox, hand-off → verdict p50: python3 \"pass\" %s, sh \"true\" %s; submit → result of the python job %s\n",
			ms(py), ms(sh), ms(pct(l.wallPy, .5)))
		fmt.Fprintf(w, "     the interpreter's start: %s (what starting python3 before the job could remove); attach, launcher and exec: %s\n",
			ms(py-sh), ms(sh))
	}
	if l := p.levers; len(l.withWall) > 0 {
		fmt.Fprintf(w, "(m') warm print(1), %d each, alternating: -image submit → result p50 %s (in the sandbox %s), -lever-base %s: %s (%s)\n",
			len(l.withWall), ms(pct(l.withWall, .5)), ms(pct(l.withSandbox, .5)), l.base, ms(pct(l.withoutWall, .5)), ms(pct(l.withoutSandbx, .5)))
	}
	p.pool.print(w)
	p.he.print(w, p.heSkip)
	for _, e := range p.errs {
		fmt.Fprintf(w, "FAILED %s\n", e)
	}
	p.printTargets(w)
}

// printTargets judges each target of Performance II against its goal, and
// says why a target was not measured.
func (p *perf2) printTargets(w io.Writer) {
	fmt.Fprintf(w, "\n%-46s %-12s %-12s %-9s %-10s %s\n", "target (Performance II)", "baseline", "sandfleet", "ratio", "goal", "")
	line := func(name, base, got string, x float64, goal string, met bool, judged bool) {
		v := ""
		if judged {
			v = "MISSED"
			if met {
				v = "met"
			}
		}
		fmt.Fprintf(w, "%-46s %-12s %-12s %-9s %-10s %s\n", name, base, got, fmt.Sprintf("%.2f×", x), goal, v)
	}
	absent := func(name, why string) { fmt.Fprintf(w, "%-46s %s\n", name, why) }
	p50 := func(d []time.Duration) time.Duration { return pct(d, .5) }
	if len(p.seqSeed) > 0 {
		x := ratio(p50(p.seqSeed), p50(p.seqDocker))
		line("(i) seed's sequence / docker run --rm, p50", ms(p50(p.seqDocker)), ms(p50(p.seqSeed)), x, "(info)", false, false)
	}
	if len(p.agentFleet) > 0 {
		x := ratio(p50(p.agentFleet), p50(p.agentSeed))
		line("(j) agent-like p50 / the seed's sequence", ms(p50(p.agentSeed)), ms(p50(p.agentFleet)), x, "≤ 0.25×", x <= 0.25, true)
		y := ratio(p50(p.agentFleet), p50(p.agentDocker))
		line("(j) agent-like p50 / docker run --rm", ms(p50(p.agentDocker)), ms(p50(p.agentFleet)), y, "(info)", false, false)
	}
	if l := p.levers; len(l.withWall) > 0 {
		x := ratio(pct(l.withWall, .5), pct(l.withoutWall, .5))
		line("(m') the lever: p50 with / without", ms(pct(l.withoutWall, .5)), ms(pct(l.withWall, .5)), x, "(info)", false, false)
	}
	if ps := p.pool; ps != nil && len(ps.seqS) > 0 {
		line(fmt.Sprintf("(m'') back-to-back p95, pool %d / pool %d", ps.big, ps.small), ms(pct(ps.seqS, .95)), ms(pct(ps.seqB, .95)),
			ratio(pct(ps.seqB, .95), pct(ps.seqS, .95)), "(info)", false, false)
		if len(p.seqDocker) > 0 && len(ps.seqA) > 0 {
			// The same sequential jobs as (b)/(a), in bursts after the first:
			// the self-sizing pool against docker run --rm of (i).
			x := ratio(pct(ps.seqA, .5), pct(p.seqDocker, .5))
			line("(m'') back-to-back p50, self-sizing / (i) docker run", ms(pct(p.seqDocker, .5)), ms(pct(ps.seqA, .5)), x, "≤ 0.20×", x <= 0.2, true)
			y := ratio(pct(ps.seqA, .95), pct(p.seqDocker, .95))
			line("(m'') back-to-back p95, self-sizing / (i) docker run", ms(pct(p.seqDocker, .95)), ms(pct(ps.seqA, .95)), y, "≤ 0.50×", y <= 0.5, true)
		}
	}
	if r := p.reportR; r != nil && len(r.docker.seq) > 0 && len(r.pooled.seq) > 0 {
		x := ratio(pct(r.pooled.seq, .5), pct(r.docker.seq, .5))
		line("(b)/(a) back-to-back p50", ms(pct(r.docker.seq, .5)), ms(pct(r.pooled.seq, .5)), x, "≤ 0.20×", x <= 0.2, true)
		y := ratio(pct(r.pooled.seq, .95), pct(r.docker.seq, .95))
		line("(b)/(a) back-to-back p95", ms(pct(r.docker.seq, .95)), ms(pct(r.pooled.seq, .95)), y, "≤ 0.50×", y <= 0.5, true)
	} else {
		absent("(b)/(a) back-to-back p50, p95", "not run: (a) and (b) run in the whole bench, not with -perf2-only")
	}
	if len(p.tput) == 5 {
		ceil, fresh, pooled, dr, seed := p.tput[0], p.tput[1], p.tput[2], p.tput[3], p.tput[4]
		js := func(c contender) string { return fmt.Sprintf("%.2f/s", c.rate()) }
		// Every job gets a sandbox of its own either way; the worker's
		// default (the pool) is the one judged, --pool 0 (each job's
		// container launched on its path) is shown beside it.
		x := pooled.rate() / ceil.rate()
		line("(k) fresh sandboxes, default pool / ceiling", js(ceil), js(pooled), x, "≥ 0.90×", x >= 0.9, true)
		line("(k) fresh sandboxes / docker run --rm", js(dr), js(pooled), pooled.rate()/dr.rate(), "(info)", false, false)
		line("(k) fresh sandboxes / the seed's sequence", js(seed), js(pooled), pooled.rate()/seed.rate(), "(info)", false, false)
		line("(k) --pool 0 / engine ceiling", js(ceil), js(fresh), fresh.rate()/ceil.rate(), "(info)", false, false)
	}
	if r := p.reportR; r != nil && r.queue > 0 {
		fmt.Fprintf(w, "%-46s %-12s %-12s %-9s %-10s %s\n", "(c) queue alone, no-op executor", "", fmt.Sprintf("%.0f/s", r.queue), "", "≥ 20000/s", verdictWord(r.queue >= 20000))
	} else {
		absent("(c) queue alone", "not run with -perf2-only")
	}
	if r := p.reportR; r != nil && r.rssIdle > 0 {
		mib := float64(r.rssIdle) / 1024
		fmt.Fprintf(w, "%-46s %-12s %-12s %-9s %-10s %s\n", "(d) worker RSS idle", "", fmt.Sprintf("%.1f MiB", mib), "", "≤ 30 MiB", verdictWord(mib <= 30))
	} else {
		absent("(d) worker RSS idle", "not run with -perf2-only")
	}
	if h := p.he; h != nil {
		x := ratio(h.fleet, h.docker)
		line("(n) HumanEval wall / docker run 4 parallel", ms(h.docker), ms(h.fleet), x, "≤ 0.55×", x <= 0.55, true)
	} else {
		absent("(n) HumanEval", "not run: "+p.heSkip)
	}
}

func verdictWord(met bool) string {
	if met {
		return "met"
	}
	return "MISSED"
}
