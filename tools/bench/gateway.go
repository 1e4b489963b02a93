package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/natsconn"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// (g) ------------------------------------------------------------------------

// gatewayFigures are one way of submitting -http-jobs no-op jobs with
// -http-clients callers, each waiting for its job's result.
type gatewayFigures struct {
	lat  []time.Duration // submit → result, per job
	tput float64
}

// gatewayOverhead runs the same no-op jobs through the Go client
// (SubmitAndWait) and through the HTTP gateway (POST /v1/jobs?wait=), on
// one in-process JetStream and worker, alternating rounds so that both see
// the same machine. What differs is the gateway: HTTP, JSON, its own NATS
// connection and its watch per request.
func gatewayOverhead(ctx context.Context, o options, r *report) error {
	srv, stopServer, err := embedded("gateway")
	if err != nil {
		return err
	}
	defer stopServer()
	conn := func() (*nats.Conn, jetstream.JetStream, error) {
		return natsconn.JetStream(natsconn.Config{URL: srv.ClientURL(), Name: "sandfleet-bench"})
	}
	wnc, wjs, err := conn()
	if err != nil {
		return err
	}
	defer wnc.Close()
	quiet := slog.New(slog.DiscardHandler)
	w, err := worker.New(wjs, noop{}, worker.Config{ID: "bench-gateway", Slots: o.queueSlots, Logger: quiet})
	if err != nil {
		return err
	}
	stop, stopNow := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(stop, ctx) }()
	defer func() {
		stopNow()
		<-done
	}()

	// The Go client and the gateway each have a connection of their own,
	// as they would in a fleet.
	cnc, cjs, err := conn()
	if err != nil {
		return err
	}
	defer cnc.Close()
	gnc, gjs, err := conn()
	if err != nil {
		return err
	}
	defer gnc.Close()
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cli, err := gateway.Open(octx, cjs, quiet)
	if err != nil {
		return err
	}
	gcli, err := gateway.Open(octx, gjs, quiet)
	if err != nil {
		return err
	}
	gw, err := gateway.New(gcli, gnc, gateway.Config{Logger: quiet, MaxWaiting: 4 * o.httpClients})
	if err != nil {
		return err
	}
	defer gw.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	sctx, stopServe := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- gw.Serve(sctx, ln, time.Second) }()
	defer func() {
		stopServe()
		<-served
	}()
	url := "http://" + ln.Addr().String() + "/v1/jobs?wait=30s"
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.httpClients, MaxConnsPerHost: o.httpClients}}
	defer hc.CloseIdleConnections()

	job := func() *jobs.Job { return &jobs.Job{Image: "python", Code: "print(1)"} }
	// The gateway waits on its own inbox (reply_to), not a KV watch per
	// job: the Go client the same way shows what HTTP alone costs.
	inbox := cnc.NewRespInbox() + "."
	var pendMu sync.Mutex
	pend := map[string]chan *jobs.Result{}
	isub, err := cnc.Subscribe(inbox+"*", func(m *nats.Msg) {
		res, err := jobs.DecodeResult(m.Data)
		if err != nil {
			return
		}
		pendMu.Lock()
		ch := pend[res.ID]
		pendMu.Unlock()
		if ch != nil {
			ch <- res
		}
	})
	if err != nil {
		return err
	}
	defer isub.Unsubscribe()
	viaGoReply := func(ctx context.Context) error {
		j := job()
		j.Normalize()
		j.ReplyTo = inbox + j.ID
		ch := make(chan *jobs.Result, 1)
		pendMu.Lock()
		pend[j.ID] = ch
		pendMu.Unlock()
		defer func() {
			pendMu.Lock()
			delete(pend, j.ID)
			pendMu.Unlock()
		}()
		if _, err := cli.Submit(ctx, j); err != nil {
			return err
		}
		select {
		case res := <-ch:
			if res.Status != jobs.StatusSucceeded {
				return fmt.Errorf("job %s: %s", res.ID, res.Status)
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	body, _ := json.Marshal(job())
	viaGo := func(ctx context.Context) error {
		res, err := cli.SubmitAndWait(ctx, job())
		if err == nil && res.Status != jobs.StatusSucceeded {
			err = fmt.Errorf("job %s: %s", res.ID, res.Status)
		}
		return err
	}
	viaHTTP := func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("HTTP %d: %s", resp.StatusCode, data)
		}
		var res jobs.Result
		if err := json.Unmarshal(data, &res); err != nil || res.Status != jobs.StatusSucceeded {
			return fmt.Errorf("result %s: %v", data, err)
		}
		return nil
	}
	round := func(n int, do func(context.Context) error, f *gatewayFigures) error {
		var next atomic.Int64
		var mu sync.Mutex
		var wg sync.WaitGroup
		errs := make([]error, o.httpClients)
		t := time.Now()
		for i := range o.httpClients {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					jctx, cancel := context.WithTimeout(ctx, time.Minute)
					t0 := time.Now()
					err := do(jctx)
					d := time.Since(t0)
					cancel()
					if err != nil {
						errs[i] = err
						return
					}
					if f != nil {
						mu.Lock()
						f.lat = append(f.lat, d)
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		if f != nil {
			f.tput += float64(n) / time.Since(t).Seconds()
		}
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}
	// Warm up both paths (connections, consumers), then alternate halves.
	for _, do := range []func(context.Context) error{viaGo, viaGoReply, viaHTTP} {
		if err := round(4*o.httpClients, do, nil); err != nil {
			return err
		}
	}
	half := o.httpJobs / 2
	for range 2 {
		if err := round(half, viaGo, &r.viaGo); err != nil {
			return fmt.Errorf("the Go client: %w", err)
		}
		if err := round(half, viaGoReply, &r.viaGoReply); err != nil {
			return fmt.Errorf("the Go client, reply_to: %w", err)
		}
		if err := round(half, viaHTTP, &r.viaHTTP); err != nil {
			return fmt.Errorf("HTTP: %w", err)
		}
	}
	r.viaGo.tput /= 2
	r.viaGoReply.tput /= 2
	r.viaHTTP.tput /= 2
	return nil
}

func (r *report) printGateway(w io.Writer) {
	if len(r.viaHTTP.lat) == 0 {
		return
	}
	fmt.Fprintf(w, "(g)  %d no-op jobs each way, %d concurrent callers waiting for results, alternating halves:\n", r.o.httpJobs, r.o.httpClients)
	row := func(name string, f gatewayFigures) {
		fmt.Fprintf(w, "%-44s %12s %12s %14s\n", name, ms2(pct(f.lat, .5)), ms2(pct(f.lat, .99)), fmt.Sprintf("%.0f jobs/s", f.tput))
	}
	fmt.Fprintf(w, "%-44s %12s %12s %14s\n", "", "p50", "p99", "throughput")
	row("     Go client, SubmitAndWait (KV watch)", r.viaGo)
	row("     Go client, Submit + reply_to inbox", r.viaGoReply)
	row("     HTTP gateway, POST /v1/jobs?wait=30s", r.viaHTTP)
	over := func(base gatewayFigures) string {
		return fmt.Sprintf("p50 %+.1f ms, p99 %+.1f ms, throughput %.2f×",
			msf(pct(r.viaHTTP.lat, .5)-pct(base.lat, .5)), msf(pct(r.viaHTTP.lat, .99)-pct(base.lat, .99)), r.viaHTTP.tput/base.tput)
	}
	fmt.Fprintf(w, "     gateway against SubmitAndWait: %s\n", over(r.viaGo))
	fmt.Fprintf(w, "     gateway against the same wait in Go (HTTP's own cost): %s\n", over(r.viaGoReply))
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ms2(d time.Duration) string { return fmt.Sprintf("%.1f ms", msf(d)) }
