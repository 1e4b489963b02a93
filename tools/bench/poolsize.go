package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// (m'') ----------------------------------------------------------------------

// poolSizing is what a pool sized to a burst would buy back-to-back jobs:
// blocks of o.n sequential jobs with no think time on a worker with
// --pool = --slots and on one with 4× that, the blocks alternating, the
// pool refilled before each block. It measures the lever "a pool that
// sizes itself from the arrival rate" at its best (the size known ahead)
// without building it: if the larger pool does not pay, neither would the
// adaptive one.
type poolSizing struct {
	slots        int
	small, big   int
	seqS, seqB   []time.Duration
	missS, missB float64 // pool misses over the blocks
}

func (p *perf2) poolSize(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "sandfleet-bench-poolsize-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	args, err := imageArgs(dir, o.image)
	if err != nil {
		return err
	}
	ps := &poolSizing{slots: o.conc, small: o.conc, big: 4 * o.conc}
	type side struct {
		w       *workerProc
		metrics string
		size    int
		seq     *[]time.Duration
		miss    *float64
	}
	start := func(size int, seq *[]time.Duration, miss *float64) (*side, error) {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		w, err := startWorker(ctx, o, "poolsize-"+strconv.Itoa(size), append([]string{"--slots", strconv.Itoa(o.conc),
			"--pool", strconv.Itoa(size), "--metrics", addr}, args...)...)
		if err != nil {
			return nil, err
		}
		return &side{w: w, metrics: "http://" + addr + "/metrics", size: size, seq: seq, miss: miss}, nil
	}
	small, err := start(ps.small, &ps.seqS, &ps.missS)
	if err != nil {
		return err
	}
	defer small.w.stop()
	big, err := start(ps.big, &ps.seqB, &ps.missB)
	if err != nil {
		return err
	}
	defer big.w.stop()
	block := func(s *side) error {
		// The pool full again (or 60 s): each block starts as a burst would.
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
			if idle, _ := metric(s.metrics, "sandfleet_pool_idle"); idle >= float64(s.size) {
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
	for r := range 2 {
		order := []*side{small, big}
		if r%2 == 1 {
			order = []*side{big, small}
		}
		for _, s := range order {
			if err := block(s); err != nil {
				return err
			}
		}
	}
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
	fmt.Fprintf(w, "(m'') back-to-back blocks of %d, --slots %d, alternating: --pool %d p50 %s p95 %s (%.0f misses); --pool %d p50 %s p95 %s (%.0f misses)\n",
		len(ps.seqS)/2, ps.slots, ps.small, ms(pct(ps.seqS, .5)), ms(pct(ps.seqS, .95)), ps.missS,
		ps.big, ms(pct(ps.seqB, .5)), ms(pct(ps.seqB, .95)), ps.missB)
}
