package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/natsconn"
	"github.com/sandfleet/sandfleet/internal/procfs"
)

// The parts of (u) and what they read of the worker.

// fanOut runs total calls of do from callers goroutines at once, each
// taking the next call when its last one returns, and times each call.
func fanOut(ctx context.Context, level, total, callers int, pid int, do func(ctx context.Context, caller int) error) latencyLevel {
	l := latencyLevel{level: level}
	var mu sync.Mutex
	var next atomic.Int64
	cpu0, t := procfs.CPU(pid), time.Now()
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for next.Add(1) <= int64(total) {
				t := time.Now()
				err := do(ctx, c)
				d := time.Since(t)
				mu.Lock()
				if err != nil {
					l.fails++
					if l.firstErr == "" {
						l.firstErr = firstLine(err.Error())
					}
				} else {
					l.ok = append(l.ok, d)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	l.wall, l.cpu = time.Since(t), procfs.CPU(pid)-cpu0
	return l
}

// jobsPart measures print(1) against concurrent callers on one worker
// with its defaults, and what the jobs left on the broker.
func (f *growthFigures) jobsPart(ctx context.Context, o options) error {
	callers, err := levels(f.o.callers)
	if err != nil {
		return fmt.Errorf("-growth-callers: %w", err)
	}
	rg, err := newRig(ctx, o, "growth-jobs")
	if err != nil {
		return err
	}
	defer rg.close()
	metrics, err := freeAddr()
	if err != nil {
		return err
	}
	h, err := startHTTPWorker(ctx, rg, o.workerBin, "growth-jobs", "--metrics "+metrics)
	if err != nil {
		return err
	}
	f.jobArgs = "--embedded --http ADDR --metrics ADDR (its defaults: --slots = cores, --pool = --slots)"
	js, done, err := brokerOf(h)
	if err != nil {
		return err
	}
	defer done()
	job := h.job(o.code)
	for range 4 { // warm-up: the image, the connections, the pool's first turn
		if _, err := job(ctx); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	time.Sleep(f.o.settle)
	before, err := streams(ctx, js)
	if err != nil {
		return err
	}
	total := 0
	for _, c := range callers {
		if c < 1 {
			continue
		}
		n := max(f.o.jobsPer, 2*c)
		step("(u) jobs: %d print(1) from %d callers at once", n, c)
		time.Sleep(f.o.settle)
		m0 := scrape(metrics)
		l := fanOut(ctx, c, n, c, h.w.cmd.Process.Pid, func(ctx context.Context, _ int) error {
			_, err := job(ctx)
			return err
		})
		m1 := scrape(metrics)
		l.warm = int(m1[poolHits]-m0[poolHits]) + int(m1[poolWaited]-m0[poolWaited])
		l.cold = int(m1[poolMisses]-m0[poolMisses]) - int(m1[poolWaited]-m0[poolWaited])
		f.jobs = append(f.jobs, l)
		total += len(l.ok) + l.fails
	}
	time.Sleep(f.o.settle) // the index and events written after the result
	after, err := streams(ctx, js)
	if err != nil {
		return err
	}
	f.store = append(f.store, delta("a finished job (print(1))", total, before, after))
	return nil
}

// The pool's counters: a miss that waited for a launch in flight was
// handed a warm sandbox all the same.
const (
	poolHits   = "sandfleet_pool_hits_total"
	poolMisses = "sandfleet_pool_misses_total"
	poolWaited = "sandfleet_pool_waited_total"
)

// poolPart reads the memory of a worker whose warm pool is full, one
// worker per --pool, the pool fixed (--pool-max = --pool).
func (f *growthFigures) poolPart(ctx context.Context, o options) error {
	pools, err := levels(f.o.pools)
	if err != nil {
		return fmt.Errorf("-growth-pools: %w", err)
	}
	for _, p := range pools {
		step("(u) memory: --pool %d, full", p)
		m, err := poolMemory(ctx, o, p, f.o.settle)
		if err != nil {
			return fmt.Errorf("--pool %d: %w", p, err)
		}
		f.pools = append(f.pools, m)
	}
	return nil
}

func poolMemory(ctx context.Context, o options, pool int, settle time.Duration) (memoryLevel, error) {
	rg, err := newRig(ctx, o, "growth-pool")
	if err != nil {
		return memoryLevel{}, err
	}
	defer rg.close()
	metrics, err := freeAddr()
	if err != nil {
		return memoryLevel{}, err
	}
	h, err := startHTTPWorker(ctx, rg, o.workerBin, "growth-pool", fmt.Sprintf("--pool %d --pool-max %d --metrics %s --pprof", pool, pool, metrics))
	if err != nil {
		return memoryLevel{}, err
	}
	for deadline := time.Now().Add(3 * time.Minute); scrape(metrics)["sandfleet_pool_idle"] < float64(pool); time.Sleep(250 * time.Millisecond) {
		if time.Now().After(deadline) {
			return memoryLevel{}, fmt.Errorf("the pool never filled: %v warm of %d", scrape(metrics)["sandfleet_pool_idle"], pool)
		}
	}
	time.Sleep(settle)
	return memoryOf(h, metrics, pool)
}

// memoryOf reads the worker's RSS and, after a GC it forces through
// /debug/pprof, its live heap.
func memoryOf(h *httpWorker, metrics string, level int) (memoryLevel, error) {
	res, err := http.Get("http://" + metrics + "/debug/pprof/heap?gc=1")
	if err != nil {
		return memoryLevel{}, err
	}
	res.Body.Close()
	rss, err := procfs.Status(h.w.cmd.Process.Pid, "VmRSS")
	if err != nil {
		return memoryLevel{}, err
	}
	heap, ok := scrape(metrics)["go_gc_heap_live_bytes"]
	if !ok {
		return memoryLevel{}, fmt.Errorf("no go_gc_heap_live_bytes at %s/metrics", metrics)
	}
	return memoryLevel{level: level, rss: float64(rss) * 1024, heap: heap}, nil
}

// scrape reads the worker's /metrics: a value per series, its labels in
// its name; empty when the worker does not answer.
func scrape(addr string) map[string]float64 {
	out := map[string]float64{}
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return out
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// brokerOf connects to the worker's embedded JetStream.
func brokerOf(h *httpWorker) (jetstream.JetStream, func(), error) {
	nc, js, err := natsconn.JetStream(natsconn.Config{URL: h.nats, Name: "sandfleet-bench-growth"})
	if err != nil {
		return nil, nil, err
	}
	return js, nc.Close, nil
}

// streams reads every stream's bytes and messages.
func streams(ctx context.Context, js jetstream.JetStream) (map[string][2]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out := map[string][2]int64{}
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		out[info.Config.Name] = [2]int64{int64(info.State.Bytes), int64(info.State.Msgs)}
	}
	return out, l.Err()
}

// delta is what changed between two readings of streams, for n of what.
func delta(what string, n int, before, after map[string][2]int64) storeDelta {
	d := storeDelta{what: what, n: n, bytes: map[string]int64{}, msgs: map[string]int64{}}
	for name, a := range after {
		b := before[name]
		// A stream whose messages did not grow by a hundredth per unit
		// only rewrote its keys (the workers' heartbeats, a session's
		// record): the work did not keep anything there.
		if db, dm := a[0]-b[0], a[1]-b[1]; n > 0 && 100*abs(dm) >= int64(n) {
			d.bytes[name], d.msgs[name] = db, dm
		}
	}
	return d
}

func abs(v int64) int64 { return max(v, -v) }

// largest is the largest of l, 0 for none.
func largest(l []int) int {
	m := 0
	for _, v := range l {
		m = max(m, v)
	}
	return m
}
