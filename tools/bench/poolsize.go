package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// (m'') ----------------------------------------------------------------------

// poolSizing is what the pool's size does to back-to-back jobs: blocks of
// o.n sequential jobs with no think time on three workers, the blocks
// alternating, each pool refilled to its target before each block: a fixed
// pool of --pool = --slots, one of 4× that (the size known ahead), and the
// self-sizing pool (--pool = --slots, --pool-max 4× that: the worker's
// default), which grows on its misses and keeps the size it learnt while
// bursts keep coming.
type poolSizing struct {
	slots            int
	small, big       int
	seqS, seqB, seqA []time.Duration
	missS, missB     float64 // pool misses over the blocks
	missA            float64
	grownA           float64 // the self-sizing pool's target after the last block
}

func (p *perf2) poolSize(ctx context.Context, o options) error {
	rg, err := newRig(ctx, o, "poolsize")
	if err != nil {
		return err
	}
	defer rg.close()
	ps := &poolSizing{slots: o.conc, small: o.conc, big: 4 * o.conc}
	type side struct {
		w       *workerProc
		metrics string
		seq     *[]time.Duration
		miss    *float64
	}
	start := func(name string, pool, poolMax int, seq *[]time.Duration, miss *float64) (*side, error) {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		w, err := rg.worker("poolsize-"+name, "--slots", strconv.Itoa(o.conc),
			"--pool", strconv.Itoa(pool), "--pool-max", strconv.Itoa(poolMax), "--metrics", addr)
		if err != nil {
			return nil, err
		}
		return &side{w: w, metrics: "http://" + addr + "/metrics", seq: seq, miss: miss}, nil
	}
	small, err := start("fixed-small", ps.small, ps.small, &ps.seqS, &ps.missS)
	if err != nil {
		return err
	}
	big, err := start("fixed-big", ps.big, ps.big, &ps.seqB, &ps.missB)
	if err != nil {
		return err
	}
	auto, err := start("self-sizing", ps.small, ps.big, &ps.seqA, &ps.missA)
	if err != nil {
		return err
	}
	block := func(s *side) error {
		// The pool full again (or 60 s): each block starts as a burst would.
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
			idle, _ := metric(s.metrics, "sandfleet_pool_idle")
			size, _ := metric(s.metrics, "sandfleet_pool_size")
			if idle >= size {
				break
			}
		}
		m0, _ := metric(s.metrics, "sandfleet_pool_misses_total")
		for range o.n {
			t := time.Now()
			if _, err := submitWait(ctx, s.w, &jobs.Job{Image: "python", Code: o.code}); err != nil {
				return err
			}
			*s.seq = append(*s.seq, time.Since(t))
		}
		m1, _ := metric(s.metrics, "sandfleet_pool_misses_total")
		*s.miss += m1 - m0
		return nil
	}
	sides := []*side{small, big, auto}
	for r := range 3 {
		for i := range sides {
			if err := block(sides[(r+i)%len(sides)]); err != nil {
				return err
			}
		}
	}
	ps.grownA, _ = metric(auto.metrics, "sandfleet_pool_size")
	p.pool = ps
	return nil
}

// metric reads one unlabelled sample from a Prometheus text endpoint.
func metric(url, name string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", url, name)
}

func (ps *poolSizing) print(w io.Writer) {
	if ps == nil || len(ps.seqS) == 0 {
		return
	}
	blocks := 3
	fmt.Fprintf(w, "(m'') back-to-back blocks of %d, --slots %d, %d blocks each, rotating: fixed --pool %d p50 %s p95 %s (%.0f misses); fixed --pool %d p50 %s p95 %s (%.0f misses); self-sizing --pool %d --pool-max %d p50 %s p95 %s (%.0f misses, grown to %.0f)\n",
		len(ps.seqS)/blocks, ps.slots, blocks, ps.small, ms(pct(ps.seqS, .5)), ms(pct(ps.seqS, .95)), ps.missS,
		ps.big, ms(pct(ps.seqB, .5)), ms(pct(ps.seqB, .95)), ps.missB,
		ps.small, ps.big, ms(pct(ps.seqA, .5)), ms(pct(ps.seqA, .95)), ps.missA, ps.grownA)
}
