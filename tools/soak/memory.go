package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// The memory figures (-memory): what a worker holds per live session, per
// warm sandbox and per stored job, each as the difference of two
// measurements of one worker (RSS, and the live heap after a forced GC).
const (
	memSessions = 10
	memPool     = 8
)

// memPoint is one measurement.
type memPoint struct {
	what       string
	rss, live  float64
	containers string
	units      int    // what was added since the reference point
	unit       string // what one of them is
	ref        *memPoint
}

// measure forces a GC (the heap profile's gc=1), lets the runtime
// publish it, and reads RSS and the live heap.
func (w *workerProc) measure(what string) memPoint {
	if res, err := http.Get("http://" + w.metricsAddr + "/debug/pprof/heap?gc=1"); err == nil {
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	time.Sleep(time.Second)
	m := w.metrics()
	return memPoint{what: what, rss: m["process_resident_memory_bytes"], live: m["go_gc_heap_live_bytes"], containers: states(w.containers())}
}

// measureCalm measures until the live heap stops falling (the store
// drops a stream's write buffer once it is idle), a minute at most.
func (w *workerProc) measureCalm(what string) memPoint {
	p := w.measure(what)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		time.Sleep(4 * time.Second)
		q := w.measure(what)
		if q.live > p.live-(256<<10) {
			return q
		}
		p = q
	}
	return p
}

func measureMemory(ctx context.Context, o options) error {
	fmt.Printf("soak -memory: load %s\n", loadAvg())
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	var points []memPoint
	w, err := startWorker(ctx, o, "--pool", "0", "--sessions", fmt.Sprint(memSessions+2))
	if err != nil {
		return err
	}
	defer w.stop()
	if _, err := w.settle(ctx, nil); err != nil {
		return err
	}
	ref := w.measure("idle, --pool 0")
	points = append(points, ref)

	ids, err := w.openSessions(ctx, memSessions)
	if err != nil {
		return err
	}
	p := w.measure(fmt.Sprintf("%d idle sessions", memSessions))
	p.units, p.unit, p.ref = memSessions, "session", &points[0]
	points = append(points, p)
	l := &load{w: w}
	for _, id := range ids {
		_ = l.call(ctx, "DELETE", "/v1/sessions/"+id, nil, nil)
	}
	http.DefaultClient.CloseIdleConnections()
	before := w.measure("sessions deleted")
	points = append(points, before)

	_ = w.heapProfile(filepath.Join(o.out, "heap-jobs-0.pprof"))
	for round := 1; round <= 2; round++ {
		if err := w.storeJobs(ctx, o.storedJobs, round); err != nil {
			return err
		}
		p = w.measureCalm(fmt.Sprintf("%d stored jobs", round*o.storedJobs))
		p.units, p.unit, p.ref = o.storedJobs, "stored job", &points[len(points)-1]
		points = append(points, p)
		_ = w.heapProfile(filepath.Join(o.out, fmt.Sprintf("heap-jobs-%d.pprof", round*o.storedJobs)))
	}
	w.stop()
	fmt.Println(w.leftovers())

	w, err = startWorker(ctx, o, "--pool", fmt.Sprint(memPool), "--sessions", "0")
	if err != nil {
		return err
	}
	defer w.stop()
	if _, err := w.settle(ctx, nil); err != nil {
		return err
	}
	p = w.measure(fmt.Sprintf("a new worker, --pool %d", memPool))
	n := len(w.containersList())
	p.units, p.unit, p.ref = n, "warm sandbox", &points[0]
	points = append(points, p)
	w.stop()
	fmt.Println(w.leftovers())
	printMemory(os.Stdout, points)
	fmt.Printf("load %s\n", loadAvg())
	return nil
}

// openSessions creates n sessions and runs a cell in each, so that each
// is a live interpreter.
func (w *workerProc) openSessions(ctx context.Context, n int) ([]string, error) {
	l := &load{w: w}
	var ids []string
	for range n {
		var info struct{ ID string }
		if err := l.call(ctx, "POST", "/v1/sessions", map[string]any{"image": "python"}, &info); err != nil {
			return ids, err
		}
		ids = append(ids, info.ID)
		if err := l.call(ctx, "POST", "/v1/sessions/"+info.ID+"/code", map[string]any{"code": "x = 1"}, nil); err != nil {
			return ids, err
		}
	}
	return ids, nil
}

// storeJobs has the worker store n jobs' results the cheapest way its
// own path allows: jobs naming an image that is no preset, which the
// worker takes, decides, rejects and stores (result, index record,
// events) without starting a container.
func (w *workerProc) storeJobs(ctx context.Context, n, round int) error {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			id := fmt.Sprintf("soak-mem-%d-%d-%d", os.Getpid(), round, i)
			cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			_, err := w.cli.Submit(cctx, &jobs.Job{ID: id, Image: "soak-no-such-preset", Code: "print(1)"})
			var res *jobs.Result
			if err == nil {
				res, err = w.cli.Wait(cctx, id)
			}
			if err == nil && res.Status != jobs.StatusRejected {
				err = fmt.Errorf("%s: %s, want rejected", id, res.Status)
			}
			if err != nil {
				mu.Lock()
				firstErr = cmpOr(firstErr, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	fmt.Printf("stored %d jobs in %s\n", n, time.Since(start).Round(time.Second))
	return firstErr
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func printMemory(w io.Writer, points []memPoint) {
	fmt.Fprintln(w, "| state | containers | RSS MiB | live heap MiB | RSS per unit | live heap per unit |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, p := range points {
		per := func(v, ref float64) string {
			if p.ref == nil || p.units == 0 {
				return ""
			}
			return fmt.Sprintf("%.1f KiB a %s", (v-ref)/1024/float64(p.units), p.unit)
		}
		var rssPer, livePer string
		if p.ref != nil {
			rssPer, livePer = per(p.rss, p.ref.rss), per(p.live, p.ref.live)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", p.what, p.containers, mib(p.rss), mib(p.live), rssPer, livePer)
	}
}
