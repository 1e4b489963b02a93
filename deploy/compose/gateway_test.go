package compose

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// TestGatewayAsSubmitter proves that the HTTP gateway needs no more than a
// submitter's permissions of nats.conf: submit with and without a wait
// (the reply comes to the gateway's inbox), get with a wait (a KV watch),
// phase, cancel, a batch and the fleet status, with no permission
// violation reported to the gateway's connection.
func TestGatewayAsSubmitter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topo := fleet.Topology{AckWait: 5 * time.Second}
	wrk, sub := roles(t, ctx, topo)
	workertest.Start(t, wrk.js, &fakeexec.Executor{}, worker.Config{ID: "w-gw", Slots: 2, Topology: topo, FetchWait: 200 * time.Millisecond})

	quiet := slog.New(slog.DiscardHandler)
	client, err := gateway.Open(ctx, sub.js, quiet)
	if err != nil {
		t.Fatalf("gateway: open client: %v", err)
	}
	gw, err := gateway.New(client, sub.nc, gateway.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	srv := httptest.NewServer(gw)
	defer srv.Close()

	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	status := func(body string) jobs.Status {
		var r jobs.Result
		_ = json.Unmarshal([]byte(body), &r)
		return r.Status
	}
	if code, body := do("POST", "/v1/jobs?wait=20s", `{"image":"python","code":"print hi"}`); code != 200 || status(body) != jobs.StatusSucceeded {
		t.Errorf("submit and wait: %d %s", code, body)
	}
	if code, body := do("POST", "/v1/jobs", `{"id":"gw-slow","image":"python","code":"sleep 1s"}`); code != 202 {
		t.Errorf("submit: %d %s", code, body)
	}
	if code, body := do("GET", "/v1/jobs/gw-slow", ""); code != 202 && code != 200 {
		t.Errorf("get: %d %s", code, body)
	}
	if code, body := do("GET", "/v1/jobs/gw-slow?wait=20s", ""); code != 200 || status(body) != jobs.StatusSucceeded {
		t.Errorf("get with wait: %d %s", code, body)
	}
	if code, body := do("POST", "/v1/jobs", `{"id":"gw-block","image":"python","code":"block"}`); code != 202 {
		t.Errorf("submit: %d %s", code, body)
	}
	if code, body := do("POST", "/v1/jobs/gw-block/cancel", ""); code != 200 || status(body) != jobs.StatusCanceled {
		t.Errorf("cancel: %d %s", code, body)
	}
	if code, body := do("POST", "/v1/batches?name=sec", "{\"image\":\"python\",\"code\":\"print a\"}\n"); code != 200 || !strings.Contains(body, `"done":1`) {
		t.Errorf("batch: %d %s", code, body)
	}
	if code, body := do("GET", "/v1/status", ""); code != 200 || !strings.Contains(body, `"w-gw"`) {
		t.Errorf("status: %d %s", code, body)
	}
	sub.noViolation(t)
}
