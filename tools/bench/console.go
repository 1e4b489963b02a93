package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// (o) ------------------------------------------------------------------------

// consoleFigures are the console's pages over a fleet of -console-jobs
// results: each page's latency and what it allocates per view.
type consoleFigures struct {
	jobs  int
	seed  time.Duration
	index uint64 // bytes of the stream INDEX
	pages []pageFigure
	heap  uint64 // live heap after the views (server, gateway and client)
}

type pageFigure struct {
	name  string
	lat   []time.Duration
	alloc uint64 // bytes allocated per view, the whole process
	size  int    // bytes of the page
}

// consoleLists seeds an in-process JetStream with n finished jobs, as the
// workers leave them (a result in RESULTS, a summary and a spec in INDEX),
// and times the console's pages over it through a real gateway.
func consoleLists(ctx context.Context, o options) (*consoleFigures, error) {
	srv, stop, err := embedded("console")
	if err != nil {
		return nil, err
	}
	defer stop()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return nil, err
	}
	topo := fleet.Topology{}
	if _, err := topo.Ensure(ctx, js); err != nil {
		return nil, err
	}
	if _, err := topo.EnsureConsumer(ctx, js, "default"); err != nil {
		return nil, err
	}
	f := &consoleFigures{jobs: o.consoleJobs}
	t0 := time.Now()
	if err := seedJobs(ctx, js, o.consoleJobs); err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}
	f.seed = time.Since(t0)
	if s, err := js.Stream(ctx, fleet.IndexStreamName); err == nil {
		if info, err := s.Info(ctx); err == nil {
			f.index = info.State.Bytes
		}
	}

	quiet := slog.New(slog.DiscardHandler)
	client, err := gateway.Open(ctx, js, quiet)
	if err != nil {
		return nil, err
	}
	gw, err := gateway.New(client, nc, gateway.Config{Logger: quiet})
	if err != nil {
		return nil, err
	}
	defer gw.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- gw.Serve(sctx, ln, time.Second) }()
	defer func() {
		stop()
		<-served
	}()
	base := "http://" + ln.Addr().String()
	mid := o.consoleJobs / 2
	for _, pg := range []struct{ name, path string }{
		{"GET /jobs (the newest 50)", "/jobs"},
		{"GET /jobs?queue=evals", "/jobs?queue=evals"},
		{"GET /jobs?status=failed (1 in 100)", "/jobs?status=failed"},
		{"GET /jobs?label=suite=nightly-7 (none)", "/jobs?label=suite%3Dnightly-7"},
		{"GET /jobs?before=<the middle>", fmt.Sprintf("/jobs?before=%d", 2*mid)},
		{"GET /jobs?q=<an ID>", fmt.Sprintf("/jobs?q=bench-%06d", mid)},
		{"GET /jobs/{id}", fmt.Sprintf("/jobs/bench-%06d", mid)},
		{"GET /batches (the newest 20,000 records)", "/batches"},
		{fmt.Sprintf("GET /batches/big (%d jobs)", o.consoleJobs/10), "/batches/big?group=problem"},
		{"GET / (the fleet)", "/"},
	} {
		p, err := timePage(ctx, base+pg.path, o.consoleViews)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pg.name, err)
		}
		p.name = pg.name
		f.pages = append(f.pages, p)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	f.heap = ms.HeapAlloc
	return f, nil
}

// seedJobs writes n finished jobs as workers do: their results, and their
// summaries and specs in the index. One job in 100 failed; every tenth is
// in the batch "big"; a third are on the queue evals.
func seedJobs(ctx context.Context, js jetstream.JetStream, n int) error {
	start := time.Now().Add(-time.Duration(n) * 10 * time.Millisecond).UTC()
	pending := make([]jetstream.PubAckFuture, 0, 2048)
	wait := func() error {
		for _, f := range pending {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		pending = pending[:0]
		return nil
	}
	put := func(subject string, v any) error {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		f, err := js.PublishAsync(subject, data)
		if err != nil {
			return err
		}
		if pending = append(pending, f); len(pending) == cap(pending) {
			return wait()
		}
		return nil
	}
	for i := range n {
		id := fmt.Sprintf("bench-%06d", i)
		job := &jobs.Job{ID: id, Queue: "default", Image: "python", Code: fmt.Sprintf("print(%d * 7)\n", i),
			Labels: map[string]string{"problem": fmt.Sprintf("p%d", i%164)}}
		if i%3 == 0 {
			job.Queue = "evals"
		}
		if i%10 == 0 {
			job.Labels[jobs.BatchLabel] = "big"
		}
		queued := start.Add(time.Duration(i) * 10 * time.Millisecond)
		started, finished := queued.Add(3*time.Millisecond), queued.Add(time.Duration(200+i%300)*time.Millisecond)
		code, dur := 0, finished.Sub(started).Milliseconds()
		res := &jobs.Result{ID: id, Status: jobs.StatusSucceeded, Exit: &code, Stdout: fmt.Sprintf("%d\n", i*7),
			DurationMS: &dur, Worker: "bench", Attempt: 1, QueuedAt: &queued, StartedAt: &started, FinishedAt: &finished, Labels: job.Labels}
		if i%100 == 7 {
			code = 1
			res.Status, res.Exit = jobs.StatusFailed, &code
		}
		summary := records.FinishedSummary(job.Queue, job, res)
		for _, rec := range []struct {
			subject string
			v       any
		}{
			{"$KV." + fleet.ResultsBucket + "." + id, res},
			{fleet.IndexSpecSubject(id), records.NewJobSpec(job)},
			{summary.Subject(), summary},
		} {
			if err := put(rec.subject, rec.v); err != nil {
				return err
			}
		}
	}
	return wait()
}

// timePage fetches url views times (after one warm-up), and measures each
// view's latency and the bytes the process allocates per view.
func timePage(ctx context.Context, url string, views int) (pageFigure, error) {
	var p pageFigure
	get := func() (int, error) {
		req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
		if err != nil {
			return 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusSeeOther {
			return 0, fmt.Errorf("%d: %.200s", resp.StatusCode, body)
		}
		return len(body), nil
	}
	if _, err := get(); err != nil {
		return p, err
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range views {
		t := time.Now()
		n, err := get()
		if err != nil {
			return p, err
		}
		p.lat = append(p.lat, time.Since(t))
		p.size = n
	}
	runtime.ReadMemStats(&after)
	p.alloc = (after.TotalAlloc - before.TotalAlloc) / uint64(views)
	return p, nil
}

func (f *consoleFigures) print(w io.Writer) {
	if f == nil {
		return
	}
	fmt.Fprintf(w, "(o)  the console over %d finished jobs (RESULTS, and INDEX %.1f MiB; seeded in %s), one gateway, in-process JetStream:\n",
		f.jobs, float64(f.index)/(1<<20), f.seed.Round(time.Second))
	fmt.Fprintf(w, "     %-44s %10s %10s %14s %10s\n", "page", "p50", "p95", "alloc/view", "page size")
	for _, p := range f.pages {
		fmt.Fprintf(w, "     %-44s %10s %10s %14s %10s\n", p.name, ms(pct(p.lat, .5)), ms(pct(p.lat, .95)),
			fmt.Sprintf("%.1f MiB", float64(p.alloc)/(1<<20)), fmt.Sprintf("%.0f KiB", float64(p.size)/1024))
	}
	fmt.Fprintf(w, "     live heap after the views: %.0f MiB (the server's caches, the gateway and the client in one process)\n",
		float64(f.heap)/(1<<20))
}
