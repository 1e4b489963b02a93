package gateway_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// apiCase is one request and what the gateway must answer.
type apiCase struct {
	name   string
	method string
	path   string
	token  string // "" sends none
	body   string
	header []string
	status int
	code   gateway.Code // the error's code; "" for a success
	// docRefuses: openapi.yaml itself says the request is invalid (bad
	// JSON, an unknown field, a pattern): the gateway and the document
	// must agree.
	docRefuses bool
	check      func(t *testing.T, r reply)
}

// run sends c, checks status and code, and checks the exchange against
// openapi.yaml.
func (c apiCase) run(t *testing.T, b *bundle, doc *contract) reply {
	t.Helper()
	var body []byte
	if c.body != "" || c.method == "POST" {
		body = []byte(c.body)
	}
	r := b.do(t, c.method, c.path, c.token, body, c.header...)
	if r.status != c.status {
		t.Errorf("%s %s: status %d, want %d; body %s", c.method, c.path, r.status, c.status, r.body)
	}
	if got := r.errorCode(); got != c.code {
		t.Errorf("%s %s: error code %q, want %q; body %s", c.method, c.path, got, c.code, r.body)
	}
	if ct := r.header.Get("Content-Type"); c.code != "" && ct != "application/json" {
		t.Errorf("%s %s: error with Content-Type %q", c.method, c.path, ct)
	}
	hdr := http.Header{}
	if c.token != "" {
		hdr.Set("Authorization", "Bearer "+c.token)
	}
	if len(body) > 0 {
		hdr.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(c.header); i += 2 {
		hdr.Set(c.header[i], c.header[i+1])
	}
	reqErr := doc.check(t, c.method, c.path, hdr, body, r)
	if refused := reqErr != nil; refused != c.docRefuses && r.status != http.StatusNotFound && r.status != http.StatusMethodNotAllowed {
		t.Errorf("%s %s: openapi.yaml refuses the request: %v, want %v (%v)", c.method, c.path, refused, c.docRefuses, reqErr)
	}
	if c.check != nil && !t.Failed() {
		c.check(t, r)
	}
	return r
}

// TestAPI is the curl-level test of every route and status: each answer
// is checked for its status and error code and against openapi.yaml.
func TestAPI(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	b := setup(t, options{cfg: gateway.Config{MaxJobBytes: 64 << 10}})

	// Fixtures: a finished job, a running one, one queued where no worker
	// serves.
	if r := b.submit(t, `{"id":"done-1","image":"python","code":"print hi"}`, "10s"); r.status != 200 {
		t.Fatalf("fixture: %d %s", r.status, r.body)
	}
	if r := b.submit(t, `{"id":"run-1","image":"python","code":"block"}`, ""); r.status != 202 {
		t.Fatalf("fixture: %d %s", r.status, r.body)
	}
	if r := b.submit(t, `{"id":"parked-1","queue":"parked","image":"python","code":"print x"}`, ""); r.status != 202 {
		t.Fatalf("fixture: %d %s", r.status, r.body)
	}
	if r := b.submit(t, `{"id":"ws-1","image":"python","workspace":"agent-7","outputs":["*.png","out/*"],"code":"write plot.png PNG\nwrite out/deep.png DEEP\nwrite notes.txt hi"}`, "10s"); r.status != 200 {
		t.Fatalf("fixture: %d %s", r.status, r.body)
	}
	testutil.Eventually(t, 10*time.Second, "run-1 running", func() bool {
		ph, err := b.client.Phase(t.Context(), "run-1")
		return err == nil && ph == jobs.PhaseRunning
	})

	result := func(status jobs.Status, check func(t *testing.T, res *jobs.Result)) func(*testing.T, reply) {
		return func(t *testing.T, r reply) {
			var res jobs.Result
			r.decode(t, &res)
			if res.Status != status {
				t.Errorf("result %s, want %s: %s", res.Status, status, r.body)
			}
			if check != nil {
				check(t, &res)
			}
		}
	}
	pending := func(status string) func(*testing.T, reply) {
		return func(t *testing.T, r reply) {
			var p gateway.Pending
			r.decode(t, &p)
			if p.Status != status || r.header.Get("Location") != "/v1/jobs/"+p.ID {
				t.Errorf("pending %+v, Location %q; want status %s", p, r.header.Get("Location"), status)
			}
		}
	}
	a := b.alice
	cases := []apiCase{
		{name: "submit and wait", method: "POST", path: "/v1/jobs?wait=10s", token: a,
			body: `{"image":"python","code":"print hello","labels":{"sandfleet.token":"forged","k":"v"}}`, status: 200,
			check: result(jobs.StatusSucceeded, func(t *testing.T, res *jobs.Result) {
				if res.Stdout != "hello\n" || res.Labels[gateway.TokenLabel] != "alice" || res.Labels["k"] != "v" {
					t.Errorf("stdout %q labels %v: want hello and the token's name", res.Stdout, res.Labels)
				}
			})},
		{name: "submit", method: "POST", path: "/v1/jobs", token: a, body: `{"image":"python","code":"print x"}`, status: 202, check: pending("queued")},
		{name: "same id, another job", method: "POST", path: "/v1/jobs?wait=10s", token: a, body: `{"id":"done-1","image":"python","code":"print other"}`, status: 409, code: gateway.CodeIDConflict},
		{name: "same id again", method: "POST", path: "/v1/jobs?wait=10s", token: a, body: `{"id":"done-1","image":"python","code":"print hi"}`, status: 200,
			check: result(jobs.StatusSucceeded, func(t *testing.T, res *jobs.Result) {
				if res.Stdout != "hi\n" || b.exec.Runs("done-1") != 1 {
					t.Errorf("stdout %q, %d runs: want the first result, one run", res.Stdout, b.exec.Runs("done-1"))
				}
			})},
		{name: "wait in seconds", method: "POST", path: "/v1/jobs?wait=10", token: a, body: `{"image":"python","code":"exit 3"}`, status: 200,
			check: result(jobs.StatusFailed, nil)},
		{name: "wait runs out", method: "POST", path: "/v1/jobs?wait=0.2s", token: a, body: `{"image":"python","code":"sleep 3s"}`, status: 202},
		{name: "not JSON", method: "POST", path: "/v1/jobs", token: a, body: `{"image":`, status: 400, code: gateway.CodeInvalidJSON, docRefuses: true},
		{name: "not an object", method: "POST", path: "/v1/jobs", token: a, body: `["x"]`, status: 400, code: gateway.CodeInvalidJSON, docRefuses: true},
		{name: "trailing data", method: "POST", path: "/v1/jobs", token: a, body: `{"image":"python","code":"x"} {}`, status: 400, code: gateway.CodeInvalidJSON},
		{name: "empty body", method: "POST", path: "/v1/jobs", token: a, body: ``, status: 400, code: gateway.CodeInvalidJSON, docRefuses: true},
		{name: "unknown field", method: "POST", path: "/v1/jobs", token: a, body: `{"image":"python","code":"x","bogus":1}`, status: 400, code: gateway.CodeUnknownField, docRefuses: true},
		{name: "unknown limit", method: "POST", path: "/v1/jobs", token: a, body: `{"image":"python","code":"x","limits":{"gpus":1}}`, status: 400, code: gateway.CodeInvalidJob, docRefuses: true},
		{name: "bad id", method: "POST", path: "/v1/jobs", token: a, body: `{"id":"a b","image":"python","code":"x"}`, status: 400, code: gateway.CodeInvalidJob, docRefuses: true},
		{name: "no image", method: "POST", path: "/v1/jobs", token: a, body: `{"code":"x"}`, status: 400, code: gateway.CodeInvalidJob},
		{name: "bad file name", method: "POST", path: "/v1/jobs", token: a, body: `{"image":"python","code":"x","files":{"../x":"y"}}`, status: 400, code: gateway.CodeInvalidJob},
		{name: "reply_to refused", method: "POST", path: "/v1/jobs", token: a, body: `{"image":"python","code":"x","reply_to":"results.x"}`, status: 400, code: gateway.CodeInvalidJob},
		{name: "bad wait", method: "POST", path: "/v1/jobs?wait=soon", token: a, body: `{"image":"python","code":"x"}`, status: 400, code: gateway.CodeInvalidRequest, docRefuses: true},
		{name: "too large", method: "POST", path: "/v1/jobs", token: a, body: `{"image":"python","code":"` + strings.Repeat("x", 70<<10) + `"}`, status: 413, code: gateway.CodeBodyTooLarge},
		{name: "no token", method: "POST", path: "/v1/jobs", body: `{"image":"python","code":"x"}`, status: 401, code: gateway.CodeUnauthorized,
			check: func(t *testing.T, r reply) {
				if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("WWW-Authenticate %q", r.header.Get("WWW-Authenticate"))
				}
			}},
		{name: "bad token", method: "GET", path: "/v1/jobs/done-1", token: "sft_nope", status: 401, code: gateway.CodeUnauthorized},
		{name: "basic auth", method: "GET", path: "/v1/status", header: []string{"Authorization", "Basic YWxpY2U6eA=="}, status: 401, code: gateway.CodeUnauthorized},
		{name: "queue not allowed", method: "POST", path: "/v1/jobs", token: b.bob, body: `{"queue":"parked","image":"python","code":"x"}`, status: 403, code: gateway.CodeForbidden},
		{name: "queue allowed", method: "POST", path: "/v1/jobs", token: b.bob, body: `{"image":"python","code":"x"}`, status: 202},
		{name: "get result", method: "GET", path: "/v1/jobs/done-1", token: a, status: 200, check: result(jobs.StatusSucceeded, nil)},
		{name: "get with wait, finished", method: "GET", path: "/v1/jobs/done-1?wait=5s", token: a, status: 200},
		{name: "get queued", method: "GET", path: "/v1/jobs/parked-1", token: b.bob, status: 202, check: pending("queued")},
		{name: "get running", method: "GET", path: "/v1/jobs/run-1?wait=0.1", token: a, status: 202, check: pending("running")},
		{name: "get unknown", method: "GET", path: "/v1/jobs/nope", token: a, status: 404, code: gateway.CodeNotFound},
		{name: "get unknown, wait", method: "GET", path: "/v1/jobs/nope?wait=30s", token: a, status: 404, code: gateway.CodeNotFound},
		{name: "get bad id", method: "GET", path: "/v1/jobs/a.b", token: a, status: 404, code: gateway.CodeNotFound},
		{name: "cancel finished", method: "POST", path: "/v1/jobs/done-1/cancel", token: a, status: 409, code: gateway.CodeAlreadyFinished},
		{name: "cancel unknown", method: "POST", path: "/v1/jobs/nope/cancel", token: a, status: 404, code: gateway.CodeNotFound},
		{name: "cancel running", method: "POST", path: "/v1/jobs/run-1/cancel", token: a, status: 200, check: result(jobs.StatusCanceled, nil)},
		{name: "events", method: "GET", path: "/v1/jobs/done-1/events", token: a, status: 200,
			check: func(t *testing.T, r reply) {
				body := string(r.body)
				if r.header.Get("Content-Type") != "text/event-stream" || !strings.Contains(body, "event: queued\n") ||
					!strings.Contains(body, "event: stdout\n") || !strings.Contains(body, `"text":"hi\n"`) ||
					!strings.HasSuffix(body, "\n\n") || !strings.Contains(body[strings.LastIndex(body, "event: "):], "event: finished\n") {
					t.Errorf("events of done-1:\n%s", body)
				}
			}},
		{name: "events of an unknown job", method: "GET", path: "/v1/jobs/nope-1/events", token: a, status: 404, code: gateway.CodeNotFound},
		{name: "events, bad Last-Event-ID", method: "GET", path: "/v1/jobs/done-1/events", token: a, header: []string{"Last-Event-ID", "x"}, status: 400, code: gateway.CodeInvalidRequest},
		{name: "submit with a workspace and outputs", method: "POST", path: "/v1/jobs?wait=10s", token: a,
			body: `{"image":"python","workspace":"agent-8","workspace_from":{"name":"agent-7","revision":1},"outputs":["*.png"],"code":"cat plot.png"}`, status: 200,
			check: result(jobs.StatusSucceeded, func(t *testing.T, res *jobs.Result) {
				if res.Stdout != "PNG\n" || res.Workspace == nil || res.Workspace.Revision != 1 || len(res.Artifacts) != 1 {
					t.Errorf("a fork of agent-7@1: stdout %q, workspace %+v, artifacts %+v", res.Stdout, res.Workspace, res.Artifacts)
				}
			})},
		{name: "bad workspace_from", method: "POST", path: "/v1/jobs", token: a, body: `{"image":"python","workspace_from":{"name":"a b"},"code":"x"}`, status: 400, code: gateway.CodeInvalidJob, docRefuses: true},
		{name: "artifacts", method: "GET", path: "/v1/jobs/ws-1/artifacts", token: a, status: 200, check: func(t *testing.T, r reply) {
			var l gateway.ArtifactList
			r.decode(t, &l)
			if len(l.Artifacts) != 2 || l.Artifacts[0].Name != "out/deep.png" || l.Artifacts[1].Name != "plot.png" || l.Artifacts[1].Size != 4 || len(l.Skipped) != 0 {
				t.Errorf("artifacts of ws-1: %s", r.body)
			}
		}},
		{name: "no artifacts", method: "GET", path: "/v1/jobs/done-1/artifacts", token: a, status: 200, check: func(t *testing.T, r reply) {
			if string(r.body) != `{"id":"done-1","artifacts":[],"skipped":[]}`+"\n" {
				t.Errorf("artifacts of done-1: %s", r.body)
			}
		}},
		{name: "artifacts of a queued job", method: "GET", path: "/v1/jobs/parked-1/artifacts", token: a, status: 202, check: pending("queued")},
		{name: "artifacts of an unknown job", method: "GET", path: "/v1/jobs/nope/artifacts", token: a, status: 404, code: gateway.CodeNotFound},
		{name: "artifact", method: "GET", path: "/v1/jobs/ws-1/artifacts/plot.png", token: a, status: 200, check: func(t *testing.T, r reply) {
			if string(r.body) != "PNG\n" || r.header.Get("Content-Type") != "application/octet-stream" ||
				r.header.Get("Content-Length") != "4" || !strings.Contains(r.header.Get("Content-Disposition"), `filename=plot.png`) {
				t.Errorf("artifact: %q, headers %v", r.body, r.header)
			}
		}},
		{name: "artifact not kept", method: "GET", path: "/v1/jobs/ws-1/artifacts/notes.txt", token: a, status: 404, code: gateway.CodeNotFound},
		{name: "artifact, no token", method: "GET", path: "/v1/jobs/ws-1/artifacts/plot.png", status: 401, code: gateway.CodeUnauthorized},
		{name: "workspace", method: "GET", path: "/v1/workspaces/agent-7", token: a, status: 200, check: func(t *testing.T, r reply) {
			var h jobs.WorkspaceHead
			r.decode(t, &h)
			if h.Name != "agent-7" || h.Revision != 1 || h.Job != "ws-1" || h.Files != 3 {
				t.Errorf("head: %s", r.body)
			}
		}},
		{name: "unknown workspace", method: "GET", path: "/v1/workspaces/nope", token: a, status: 404, code: gateway.CodeNotFound},
		{name: "bad workspace name", method: "GET", path: "/v1/workspaces/a.b", token: a, status: 404, code: gateway.CodeNotFound, docRefuses: true},
		{name: "snapshot", method: "GET", path: "/v1/workspaces/agent-7/snapshot", token: a, status: 200, check: func(t *testing.T, r reply) {
			names := tarNames(t, r.body)
			if r.header.Get("Content-Type") != "application/x-tar" || r.header.Get("X-Sandfleet-Revision") != "1" ||
				!slices.Equal(names, []string{"notes.txt", "out/deep.png", "plot.png"}) {
				t.Errorf("snapshot: files %v, headers %v", names, r.header)
			}
		}},
		{name: "snapshot of a revision", method: "GET", path: "/v1/workspaces/agent-7/snapshot?revision=1", token: a, status: 200},
		{name: "snapshot of a revision not kept", method: "GET", path: "/v1/workspaces/agent-7/snapshot?revision=9", token: a, status: 404, code: gateway.CodeNotFound},
		{name: "snapshot, bad revision", method: "GET", path: "/v1/workspaces/agent-7/snapshot?revision=x", token: a, status: 400, code: gateway.CodeInvalidRequest, docRefuses: true},
		{name: "snapshot of an unknown workspace", method: "GET", path: "/v1/workspaces/nope/snapshot", token: a, status: 404, code: gateway.CodeNotFound},
		{name: "events, no token", method: "GET", path: "/v1/jobs/done-1/events", status: 401, code: gateway.CodeUnauthorized},
		{name: "status", method: "GET", path: "/v1/status", token: a, status: 200, check: func(t *testing.T, r reply) {
			var st jobs.FleetStatus
			r.decode(t, &st)
			if len(st.Workers) != 1 || st.Workers[0].ID != "w1" {
				t.Errorf("workers %+v", st.Workers)
			}
		}},
		{name: "healthz", method: "GET", path: "/healthz", status: 200},
		{name: "readyz", method: "GET", path: "/readyz", status: 200},
		{name: "metrics", method: "GET", path: "/metrics", status: 200, check: func(t *testing.T, r reply) {
			if !strings.Contains(string(r.body), `sandfleet_gateway_requests_total{code="200",route="POST /v1/jobs"}`) {
				t.Errorf("metrics lack the request counter:\n%.2000s", r.body)
			}
			described := map[string]bool{}
			for _, d := range gateway.MetricDescs() {
				described[d.Name] = true
			}
			for line := range strings.Lines(string(r.body)) {
				if f := strings.Fields(line); len(f) == 4 && f[1] == "TYPE" && !described[f[2]] {
					t.Errorf("%s is served but not in gateway.MetricDescs (docs/metrics.md)", f[2])
				}
			}
		}},
		{name: "document", method: "GET", path: "/openapi.yaml", status: 200},
		{name: "no route", method: "GET", path: "/v2/jobs", token: a, status: 404, code: gateway.CodeNotFound},
		{name: "wrong method", method: "DELETE", path: "/v1/jobs/done-1", token: a, status: 405, code: gateway.CodeMethodNotAllow,
			check: func(t *testing.T, r reply) {
				if r.header.Get("Allow") != "GET" {
					t.Errorf("Allow %q", r.header.Get("Allow"))
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, b, doc) })
	}

	// An artifact's name keeps its slashes in the path (OpenAPI's path
	// templates cannot say so, hence outside the contract check).
	t.Run("artifact in a directory", func(t *testing.T) {
		r := b.do(t, "GET", "/v1/jobs/ws-1/artifacts/out/deep.png", a, nil)
		if r.status != 200 || string(r.body) != "DEEP\n" {
			t.Errorf("%d %q, want 200 DEEP", r.status, r.body)
		}
	})

	// A body of unknown length is cut at the cap too.
	t.Run("too large, chunked", func(t *testing.T) {
		body := io.MultiReader(strings.NewReader(`{"image":"python","code":"`), strings.NewReader(strings.Repeat("x", 70<<10)), strings.NewReader(`"}`))
		req, _ := http.NewRequestWithContext(t.Context(), "POST", b.url+"/v1/jobs", body)
		req.Header.Set("Authorization", "Bearer "+a)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if r := (reply{resp.StatusCode, resp.Header, data}); r.status != 413 || r.errorCode() != gateway.CodeBodyTooLarge {
			t.Errorf("%d %s, want 413 body_too_large", r.status, data)
		}
	})
}

// A waiting submit whose reply never comes (its result was stored by a
// cancel, with no worker to publish it) still answers with the result
// once its wait ends: RESULTS is the authority, the reply a shortcut.
func TestSubmitWaitWithoutReply(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	got := make(chan reply, 1)
	go func() {
		got <- b.submit(t, `{"id":"parked-3","queue":"parked","image":"python","code":"print x"}`, "4s")
	}()
	testutil.Eventually(t, 5*time.Second, "parked-3 queued", func() bool {
		_, err := b.client.Phase(t.Context(), "parked-3")
		return err == nil
	})
	if r := b.do(t, "POST", "/v1/jobs/parked-3/cancel", b.alice, nil); r.status != 200 {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	r := <-got
	var res jobs.Result
	r.decode(t, &res)
	if r.status != 200 || res.Status != jobs.StatusCanceled {
		t.Errorf("%d %s, want 200 and the canceled result", r.status, r.body)
	}
}

// A full queue is 429 queue_full with Retry-After, and nothing is queued.
func TestQueueFull(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	b := setup(t, options{topo: fleet.Topology{MaxMsgs: 2}, cfg: gateway.Config{RetryAfter: 3 * time.Second}})
	for i := range 2 {
		apiCase{method: "POST", path: "/v1/jobs", token: b.alice, body: fmt.Sprintf(`{"queue":"parked","image":"python","code":"print %d"}`, i), status: 202}.run(t, b, doc)
	}
	r := apiCase{method: "POST", path: "/v1/jobs", token: b.alice, body: `{"queue":"parked","image":"python","code":"print 3"}`,
		status: 429, code: gateway.CodeQueueFull}.run(t, b, doc)
	if r.header.Get("Retry-After") != "3" {
		t.Errorf("Retry-After %q, want 3", r.header.Get("Retry-After"))
	}
}

// Past MaxWaiting long polls, the next is 429 too_many_requests at once.
func TestTooManyWaiting(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	b := setup(t, options{cfg: gateway.Config{MaxWaiting: 1}})
	b.submit(t, `{"id":"parked-2","queue":"parked","image":"python","code":"print x"}`, "")
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", b.url+"/v1/jobs/parked-2?wait=30s", nil)
		req.Header.Set("Authorization", "Bearer "+b.alice)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	defer wg.Wait()
	defer cancel()
	testutil.Eventually(t, 5*time.Second, "the first long poll holds its slot", func() bool {
		return gaugeValue(t, b, `sandfleet_gateway_slots_busy{kind="waiting"}`) == 1
	})
	r := apiCase{method: "GET", path: "/v1/jobs/parked-2?wait=5s", token: b.alice, status: 429, code: gateway.CodeTooManyRequests}.run(t, b, doc)
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	apiCase{method: "GET", path: "/v1/jobs/parked-2", token: b.alice, status: 202}.run(t, b, doc) // no wait: no slot needed
}

// readyz says 503 while NATS is not connected.
func TestReadyz(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	b := setup(t, options{cfg: gateway.Config{Ready: func() bool { return false }}})
	apiCase{method: "GET", path: "/readyz", status: 503, code: gateway.CodeUnavailable}.run(t, b, doc)
	apiCase{method: "GET", path: "/healthz", status: 200}.run(t, b, doc)
}

// A gateway without tokens takes requests without one, and keeps the
// token label off jobs (nobody may claim one).
func TestOpenGateway(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	b := setup(t, options{open: true})
	r := apiCase{method: "POST", path: "/v1/jobs?wait=10s", body: `{"image":"python","code":"print x","labels":{"sandfleet.token":"admin"}}`, status: 200}.run(t, b, doc)
	var res jobs.Result
	r.decode(t, &res)
	if _, ok := res.Labels[gateway.TokenLabel]; ok {
		t.Errorf("labels %v: the token label passed through an open gateway", res.Labels)
	}
}

// A client that sends its headers and then too little of its body is cut
// off with 408 after ReadTimeout, and a long poll outlives ReadTimeout.
func TestSlowClients(t *testing.T) {
	t.Parallel()
	b := setup(t, options{cfg: gateway.Config{ReadTimeout: 300 * time.Millisecond}})
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\n{\"image\":", b.alice)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	if r := (reply{resp.StatusCode, resp.Header, data}); r.status != 408 || r.errorCode() != gateway.CodeRequestTimeout {
		t.Errorf("%d %s, want 408 request_timeout", r.status, data)
	}

	// The read deadline ends with the body: a wait of 1 s, over the
	// 300 ms ReadTimeout, is not cut short.
	start := time.Now()
	r := b.submit(t, `{"image":"python","code":"sleep 1s\nprint late"}`, "5s")
	if r.status != 200 || time.Since(start) < time.Second {
		t.Errorf("%d after %s: %s", r.status, time.Since(start), r.body)
	}
}

// gaugeValue reads one sample of the gateway's /metrics.
func gaugeValue(t testing.TB, b *bundle, series string) float64 {
	t.Helper()
	r := b.do(t, "GET", "/metrics", "", nil)
	for line := range strings.SplitSeq(string(r.body), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return 0
}

// tarNames lists the entries of a tar archive.
func tarNames(t *testing.T, data []byte) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatalf("not a tar: %v", err)
		}
		names = append(names, h.Name)
	}
}

// A tenant's jobs and workspaces are named <tenant>.<name>, and a worker
// runs a job so named as the tenant's: a token, which is no tenant, must
// not reach them. Each way of naming one is refused, and the tenant's
// workspace is not made.
func TestTenantNamesRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for _, body := range []string{
		`{"id":"acme.w1","image":"python","code":"write f.txt planted"}`,
		`{"image":"python","workspace":"acme.agent","code":"write f.txt planted"}`,
		`{"image":"python","workspace":"mine","workspace_from":{"name":"acme.agent"},"code":"cat f.txt"}`,
		`{"image":"python","workspace_from":{"name":"acme.agent"},"code":"cat f.txt"}`,
	} {
		for _, path := range []string{"/v1/jobs", "/v1/jobs?wait=5s"} {
			r := b.do(t, "POST", path, b.bob, []byte(body))
			if r.status != 400 || r.errorCode() != gateway.CodeInvalidJob || !strings.Contains(string(r.body), "tenant") {
				t.Errorf("POST %s %s: %d %s; want 400 invalid_job naming the tenant", path, body, r.status, r.body)
			}
		}
	}
	if r := b.do(t, "GET", "/v1/workspaces/acme.agent", b.bob, nil); r.status != 404 {
		t.Errorf("tenant acme's workspace after the tries: %d %s", r.status, r.body)
	}

	// A job and a workspace tenant acme did make (over NATS): no read
	// route reaches them, or cancels the job, whatever the token.
	if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "acme.w1", Image: "python", Workspace: "acme.agent", Outputs: []string{"*.txt"},
		Code: "write secret.txt acme-private"}); err != nil {
		t.Fatal(err)
	}
	if res, err := b.client.Wait(t.Context(), "acme.w1"); err != nil || res.Status != jobs.StatusSucceeded || len(res.Artifacts) != 1 {
		t.Fatalf("acme's job: %v %+v", err, res)
	}
	for _, req := range []struct{ method, path string }{
		{"GET", "/v1/jobs/acme.w1"}, {"GET", "/v1/jobs/acme.w1?wait=1s"}, {"GET", "/v1/jobs/acme.w1/events"},
		{"GET", "/v1/jobs/acme.w1/artifacts"}, {"GET", "/v1/jobs/acme.w1/artifacts/secret.txt"},
		{"POST", "/v1/jobs/acme.w1/cancel"},
		{"GET", "/v1/workspaces/acme.agent"}, {"GET", "/v1/workspaces/acme.agent/snapshot"},
	} {
		r := b.do(t, req.method, req.path, b.alice, nil)
		if r.status != 404 || r.errorCode() != gateway.CodeNotFound || bytes.Contains(r.body, []byte("acme-private")) {
			t.Errorf("%s %s: %d %.200s; want 404 not_found", req.method, req.path, r.status, r.body)
		}
	}
}

// A client that retries its submit after a lost answer, with a wait,
// while the job is still running: the stream refuses the copy, so no
// reply comes for it, and the answer is the job's result as soon as it is
// stored, not 202 at the end of the wait.
func TestRetriedSubmitWithWaitAnswersWithTheResult(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	release := filepath.Join(t.TempDir(), "go")
	job := `{"id":"retry-wait","image":"python","code":"waitfile ` + release + `\nprint done"}`
	if r := b.submit(t, job, ""); r.status != 202 {
		t.Fatalf("first submit: %d %s", r.status, r.body)
	}
	testutil.Eventually(t, 10*time.Second, "the job running", func() bool { return b.exec.Running() == 1 })
	answered := make(chan reply, 1)
	go func() { answered <- b.submit(t, job, "60s") }() // the retry
	// It holds a waiting slot from just before its watch and publish.
	testutil.Eventually(t, 10*time.Second, "the retry waiting", func() bool {
		return gaugeValue(t, b, `sandfleet_gateway_slots_busy{kind="waiting"}`) == 1
	})
	released := time.Now()
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-answered:
		if r.status != 200 || !strings.Contains(string(r.body), `"status":"succeeded"`) {
			t.Fatalf("retried submit: %d %s", r.status, r.body)
		}
		t.Logf("answered %s after the job was released", time.Since(released).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("the retried submit did not answer within 30 s of the job's end: it waits out its whole ?wait=60s")
	}
	if n := b.exec.Runs("retry-wait"); n != 1 {
		t.Errorf("the job ran %d times", n)
	}
}

// An open gateway (no tokens, loopback only) is still reachable from a
// page in the viewer's browser: a write another site sends is refused (its
// Origin or Sec-Fetch-Site says so), and so is any request whose Host is
// not a loopback name (a DNS rebinding). A client that is no browser, and
// the gateway's own console, are served.
func TestOpenGatewayRefusesOtherSites(t *testing.T) {
	t.Parallel()
	b := setup(t, options{open: true})
	job := []byte(`{"id":"planted","image":"python","code":"print hi"}`)
	for _, tc := range []struct {
		name   string
		method string
		path   string
		body   []byte
		hdr    []string
		status int
	}{
		{"a submit from another site", "POST", "/v1/jobs", job, []string{"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}, 403},
		{"a submit from another site, Origin only", "POST", "/v1/jobs", job, []string{"Origin", "http://evil.example"}, 403},
		{"a cancel from another localhost port", "POST", "/v1/jobs/planted/cancel", nil, []string{"Sec-Fetch-Site", "same-site"}, 403},
		{"a read under a rebound name", "GET", "/v1/jobs/planted", nil, []string{"Host", "rebind.example:8080"}, 403},
		{"a submit from a client that is no browser", "POST", "/v1/jobs", job, nil, 202},
		{"a read from a client that is no browser", "GET", "/v1/jobs/planted", nil, nil, 0},
		{"a cancel from the gateway's own page", "POST", "/v1/jobs/planted/cancel", nil, []string{"Sec-Fetch-Site", "same-origin"}, 0},
	} {
		r := b.do(t, tc.method, tc.path, "", tc.body, tc.hdr...)
		switch {
		case tc.status == 403 && (r.status != 403 || r.errorCode() != gateway.CodeForbidden):
			t.Errorf("%s: %d %s, want 403 forbidden", tc.name, r.status, r.body)
		case tc.status == 202 && r.status != 202:
			t.Errorf("%s: %d %s, want 202", tc.name, r.status, r.body)
		case tc.status == 0 && (r.status == 403 || r.status >= 500):
			t.Errorf("%s: %d %s, want it served", tc.name, r.status, r.body)
		}
	}
}

// A job with the most labels a caller may give still takes the gateway's
// sandfleet.token label, alone and as a batch line (whose batch label is
// another the fleet adds).
func TestMostLabelsThroughATokenedGateway(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	var kv []string
	for i := range 64 {
		kv = append(kv, fmt.Sprintf(`"k%d":"v"`, i))
	}
	job := `{"image":"python","code":"print hi","labels":{` + strings.Join(kv, ",") + `}}`
	r := b.submit(t, job, "10s")
	var res jobs.Result
	if r.status != http.StatusOK {
		t.Fatalf("a job with 64 labels: %d %s", r.status, r.body)
	}
	r.decode(t, &res)
	if len(res.Labels) != 65 || res.Labels["sandfleet.token"] != "alice" {
		t.Errorf("labels of the result: %d, token %q", len(res.Labels), res.Labels["sandfleet.token"])
	}
	r = b.do(t, "POST", "/v1/batches?name=lbl", b.alice, []byte(job+"\n"))
	if r.status != http.StatusOK || bytes.Contains(r.body, []byte(`"error"`)) || !bytes.Contains(r.body, []byte(`"sandfleet.batch":"lbl"`)) {
		t.Errorf("a batch line with 64 labels: %d %s", r.status, r.body)
	}
}

// A waiting submit with the caller's own ID (both clients send one) takes
// its result on the gateway's inbox like one without: no consumer on
// RESULTS per job. Submitted again once finished, it is answered with the
// stored result.
func TestWaitWithCallersIDNeedsNoWatch(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	sub, err := b.js.Conn().SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.CREATED.KV_RESULTS.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.js.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	job := `{"id":"0194b3a2-7c1e-7d2a-9b3c-1234567890ab","image":"python","code":"print hi"}`
	for i := range 2 {
		r := b.submit(t, job, "10s")
		var res jobs.Result
		if r.status != http.StatusOK {
			t.Fatalf("submit %d: %d %s", i, r.status, r.body)
		}
		r.decode(t, &res)
		if res.Status != jobs.StatusSucceeded || res.Stdout != "hi\n" {
			t.Fatalf("submit %d: %+v", i, res)
		}
	}
	if n := b.exec.Total(); n != 1 {
		t.Errorf("the job ran %d times", n)
	}
	if m, err := sub.NextMsg(300 * time.Millisecond); err == nil {
		t.Errorf("a consumer on RESULTS for a waiting submit: %s", m.Subject)
	}
}

// A submit with an ID that holds another job's result (another spec, or
// another token's job) is 409 id_conflict, never that job's verdict; the
// same job submitted again by its own token gets its result.
func TestSubmitAtAnotherJobsID(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	b := setup(t, options{})
	r := apiCase{method: "POST", path: "/v1/jobs?wait=10s", token: b.bob, body: `{"id":"taken","image":"python","code":"print planted"}`, status: 200}.run(t, b, doc)
	if !strings.Contains(string(r.body), `"status":"succeeded"`) {
		t.Fatalf("planting: %s", r.body)
	}
	for _, tc := range []struct {
		name, token, body string
		status            int
	}{
		{"another spec, waiting", b.alice, `{"id":"taken","image":"python","code":"exit 1"}`, 409},
		{"the same spec, another token", b.alice, `{"id":"taken","image":"python","code":"print planted"}`, 409},
		{"the same job, its own token", b.bob, `{"id":"taken","image":"python","code":"print planted"}`, 200},
	} {
		c := apiCase{method: "POST", path: "/v1/jobs?wait=10s", token: tc.token, body: tc.body, status: tc.status}
		if tc.status == 409 {
			c.code = gateway.CodeIDConflict
		}
		c.run(t, b, doc)
	}
	// A caller's sandfleet.* labels (the token's excepted, which the
	// gateway replaces) are refused: sandfleet.batch=B would count the job
	// in batch B's report.
	apiCase{method: "POST", path: "/v1/jobs", token: b.alice, body: `{"image":"python","code":"print x","labels":{"sandfleet.batch":"nightly"}}`,
		status: 400, code: gateway.CodeInvalidJob}.run(t, b, doc)
}

// hold sends a request in the background and leaves it to the gateway
// until the test ends, then cuts it and waits for it.
func (b *bundle) hold(t *testing.T, method, path, token, body string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		req, _ := http.NewRequestWithContext(ctx, method, b.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// Long polls and batches are bounded per token as event streams are: one
// token at its most leaves the others theirs, and its own next is 429.
func TestLongSlotsPerToken(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	t.Run("waiting", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{cfg: gateway.Config{MaxWaiting: 4, MaxWaitingPerToken: 1}})
		b.submit(t, `{"id":"parked-w","queue":"parked","image":"python","code":"print x"}`, "")
		b.hold(t, "GET", "/v1/jobs/parked-w?wait=60s", b.alice, "")
		testutil.Eventually(t, 10*time.Second, "alice's long poll waiting", func() bool {
			return gaugeValue(t, b, `sandfleet_gateway_slots_busy{kind="waiting"}`) == 1
		})
		b.hold(t, "GET", "/v1/jobs/parked-w?wait=60s", b.bob, "")
		testutil.Eventually(t, 10*time.Second, "bob's long poll waiting beside it", func() bool {
			return gaugeValue(t, b, `sandfleet_gateway_slots_busy{kind="waiting"}`) == 2
		})
		r := apiCase{method: "POST", path: "/v1/jobs?wait=5s", token: b.alice, body: `{"queue":"parked","image":"python","code":"print y"}`,
			status: 429, code: gateway.CodeTooManyRequests}.run(t, b, doc)
		if r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), `token \"alice\"`) {
			t.Errorf("alice's second long poll: Retry-After %q, %s", r.header.Get("Retry-After"), r.body)
		}
	})
	t.Run("batch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{cfg: gateway.Config{MaxBatches: 4, MaxBatchesPerToken: 1}})
		b.hold(t, "POST", "/v1/batches?queue=parked", b.alice, `{"image":"python","code":"print 1"}`+"\n")
		testutil.Eventually(t, 10*time.Second, "alice's batch running", func() bool {
			return gaugeValue(t, b, `sandfleet_gateway_slots_busy{kind="batch"}`) == 1
		})
		r := b.do(t, "POST", "/v1/batches", b.bob, []byte(`{"image":"python","code":"print 2"}`+"\n"))
		if r.status != 200 || !strings.Contains(string(r.body), `"succeeded"`) {
			t.Fatalf("bob's batch beside alice's: %d %s", r.status, r.body)
		}
		r = b.do(t, "POST", "/v1/batches?queue=parked", b.alice, []byte(`{"image":"python","code":"print 3"}`+"\n"))
		if r.status != 429 || r.errorCode() != gateway.CodeTooManyRequests || r.header.Get("Retry-After") == "" {
			t.Errorf("alice's second batch: %d %s, want 429 too_many_requests with Retry-After", r.status, r.body)
		}
	})
}

// A route that does not exist is 404 not_found whatever the method, the
// body and the token; a known path asked with another method is 405, with
// or without a body.
func TestUnknownRoutes(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	b := setup(t, options{})
	job := `{"image":"python","code":"print 1"}`
	for _, c := range []apiCase{
		{method: "GET", path: "/v2/jobs", token: b.alice, status: 404, code: gateway.CodeNotFound},
		{method: "POST", path: "/v2/jobs", token: b.alice, body: job, status: 404, code: gateway.CodeNotFound},
		{method: "POST", path: "/v1/job", token: b.alice, body: job, status: 404, code: gateway.CodeNotFound},
		{method: "PUT", path: "/nothing/here", token: b.alice, body: job, status: 404, code: gateway.CodeNotFound},
		{method: "POST", path: "/v2/jobs", body: job, status: 404, code: gateway.CodeNotFound},
		{method: "DELETE", path: "/v2/jobs", status: 404, code: gateway.CodeNotFound},
		{method: "POST", path: "/", token: b.alice, body: job, status: 404, code: gateway.CodeNotFound},
		{method: "POST", path: "/v1/status", token: b.alice, body: job, status: 405, code: gateway.CodeMethodNotAllow},
		{method: "DELETE", path: "/v1/jobs/x", token: b.alice, body: job, status: 405, code: gateway.CodeMethodNotAllow},
	} {
		c.run(t, b, doc)
	}
	// A body of unknown length (chunked) too.
	req, _ := http.NewRequestWithContext(t.Context(), "POST", b.url+"/v2/jobs", io.MultiReader(strings.NewReader(job)))
	req.Header.Set("Authorization", "Bearer "+b.alice)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("chunked POST to no route: %s", resp.Status)
	}
}

// The template registry over HTTP: an operator's token registers (a new
// version each time), lists, shows and removes; a bad template is 400
// naming the field, an unknown one 404, no token 401.
func TestTemplatesAPI(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	b := setup(t, options{})
	body := `{"image":"sandfleet/sandbox:latest","main_file":"main.py","argv":["python3","main.py"],` +
		`"start":["sh","-c","touch /tmp/ok"],"ready":["test","-e","/tmp/ok"],"env":{"A":"1"}}`
	var v1, v2 struct {
		Name    string `json:"name"`
		Version uint64 `json:"version"`
	}
	apiCase{method: "PUT", path: "/v1/templates/repo-x", token: b.alice, body: body, status: 200}.run(t, b, doc).decode(t, &v1)
	apiCase{method: "PUT", path: "/v1/templates/repo-x", token: b.alice, body: body, status: 200}.run(t, b, doc).decode(t, &v2)
	if v1.Name != "repo-x" || v2.Version <= v1.Version {
		t.Errorf("two puts: %+v then %+v, want a new version", v1, v2)
	}
	r := apiCase{method: "GET", path: "/v1/templates", token: b.alice, status: 200}.run(t, b, doc)
	if !strings.Contains(string(r.body), `"repo-x"`) {
		t.Errorf("list: %s", r.body)
	}
	apiCase{method: "GET", path: "/v1/templates/repo-x", token: b.alice, status: 200}.run(t, b, doc)
	for _, c := range []apiCase{
		{name: "a preset's name", method: "PUT", path: "/v1/templates/python", token: b.alice, body: body, status: 400, code: gateway.CodeInvalidRequest},
		{name: "no argv", method: "PUT", path: "/v1/templates/repo-y", token: b.alice, body: `{"image":"x","main_file":"m.py"}`, status: 400, code: gateway.CodeInvalidRequest},
		{name: "another name in the body", method: "PUT", path: "/v1/templates/repo-y", token: b.alice, body: `{"name":"repo-z","image":"x","main_file":"m.py","argv":["x"]}`, status: 400, code: gateway.CodeInvalidRequest},
		{name: "unknown field", method: "PUT", path: "/v1/templates/repo-y", token: b.alice, body: `{"imag":"x"}`, status: 400, code: gateway.CodeInvalidJSON, docRefuses: true},
		{name: "unknown", method: "GET", path: "/v1/templates/nope", token: b.alice, status: 404, code: gateway.CodeNotFound},
		{name: "no token", method: "GET", path: "/v1/templates", status: 401, code: gateway.CodeUnauthorized},
	} {
		c.run(t, b, doc)
	}
	apiCase{method: "DELETE", path: "/v1/templates/repo-x", token: b.alice, status: 204}.run(t, b, doc)
	apiCase{name: "deleted", method: "GET", path: "/v1/templates/repo-x", token: b.alice, status: 404, code: gateway.CodeNotFound}.run(t, b, doc)
}

// A tenant's token registers, lists, shows and removes its tenant's own
// templates: another tenant's token sees none of them and reaches neither
// them nor the operator's; an image that is no preset's nor an operator
// template's, a pool, a forged tenant and the 17th template are refused;
// a read-only token lists and shows only.
func TestTenantTemplatesAPI(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	b := setup(t, options{tenants: []string{"team-a", "team-b"}})
	a, bt, aRead := b.tenant["team-a"], b.tenant["team-b"], b.tenantRead["team-a"]
	tmpl := func(image, extra string) string {
		return `{"image":"` + image + `","main_file":"main.py","argv":["python3","main.py"]` + extra + `}`
	}
	apiCase{method: "PUT", path: "/v1/templates/t1", token: b.alice, body: tmpl("sandfleet/task-x:1", `,"description":"the operator's"`), status: 200}.run(t, b, doc)
	var stored struct {
		Name, Tenant, Description string
		Version                   uint64
	}
	apiCase{method: "PUT", path: "/v1/templates/t1", token: a, body: tmpl("sandfleet/sandbox:latest", `,"description":"a's"`), status: 200}.run(t, b, doc).decode(t, &stored)
	if stored.Name != "t1" || stored.Tenant != "team-a" || stored.Version == 0 {
		t.Errorf("a's put: %+v", stored)
	}
	listed := func(token string) []string {
		var l struct {
			Templates []struct{ Name, Tenant, Description string } `json:"templates"`
		}
		apiCase{method: "GET", path: "/v1/templates", token: token, status: 200}.run(t, b, doc).decode(t, &l)
		var out []string
		for _, tp := range l.Templates {
			out = append(out, tp.Tenant+"/"+tp.Name+":"+tp.Description)
		}
		return out
	}
	if got := listed(a); !slices.Equal(got, []string{"team-a/t1:a's"}) {
		t.Errorf("a's list: %v", got)
	}
	if got := listed(aRead); !slices.Equal(got, []string{"team-a/t1:a's"}) {
		t.Errorf("a's read-only list: %v", got)
	}
	if got := listed(bt); len(got) != 0 {
		t.Errorf("b's list: %v", got)
	}
	if got := listed(b.alice); !slices.Equal(got, []string{"/t1:the operator's"}) {
		t.Errorf("the operator's list: %v", got)
	}
	apiCase{method: "GET", path: "/v1/templates/t1", token: aRead, status: 200, check: func(t *testing.T, r reply) {
		if !strings.Contains(string(r.body), `"a's"`) {
			t.Errorf("a's read-only show: %s", r.body)
		}
	}}.run(t, b, doc)
	for _, c := range []apiCase{
		{name: "b shows a's", method: "GET", path: "/v1/templates/t1", token: bt, status: 404, code: gateway.CodeNotFound},
		{name: "b removes a's", method: "DELETE", path: "/v1/templates/t1", token: bt, status: 404, code: gateway.CodeNotFound},
		{name: "b names a's key", method: "GET", path: "/v1/templates/_tenant.team-a.t1", token: bt, status: 404, code: gateway.CodeNotFound, docRefuses: true},
		{name: "b names a's key, escaped", method: "GET", path: "/v1/templates/_tenant%2Eteam-a%2Et1", token: bt, status: 404, code: gateway.CodeNotFound, docRefuses: true},
		{name: "b puts a's key", method: "PUT", path: "/v1/templates/_tenant.team-a.t1", token: bt, body: tmpl("sandfleet/sandbox:latest", ""), status: 400, code: gateway.CodeInvalidRequest, docRefuses: true},
		{name: "b names a in the body", method: "PUT", path: "/v1/templates/t9", token: bt, body: tmpl("sandfleet/sandbox:latest", `,"tenant":"team-a"`), status: 400, code: gateway.CodeInvalidRequest},
		{name: "the operator's token names a tenant", method: "PUT", path: "/v1/templates/t9", token: b.alice, body: tmpl("sandfleet/sandbox:latest", `,"tenant":"team-a"`), status: 400, code: gateway.CodeInvalidRequest},
		{name: "a wildcard", method: "PUT", path: "/v1/templates/t.%3E", token: bt, body: tmpl("sandfleet/sandbox:latest", ""), status: 400, code: gateway.CodeInvalidRequest, docRefuses: true},
		{name: "a star", method: "GET", path: "/v1/templates/%2A", token: bt, status: 404, code: gateway.CodeNotFound, docRefuses: true},
		{name: "an empty token", method: "PUT", path: "/v1/templates/a..b", token: bt, body: tmpl("sandfleet/sandbox:latest", ""), status: 400, code: gateway.CodeInvalidRequest},
		{name: "uppercase", method: "PUT", path: "/v1/templates/T1", token: bt, body: tmpl("sandfleet/sandbox:latest", ""), status: 400, code: gateway.CodeInvalidRequest, docRefuses: true},
		{name: "the worker's image", method: "PUT", path: "/v1/templates/t2", token: a, body: tmpl("sandfleet/worker:latest", ""), status: 400, code: gateway.CodeInvalidRequest,
			check: func(t *testing.T, r reply) {
				if !strings.Contains(string(r.body), "image") {
					t.Errorf("the refusal does not name the field: %s", r.body)
				}
			}},
		{name: "a pool", method: "PUT", path: "/v1/templates/t2", token: a, body: tmpl("sandfleet/sandbox:latest", `,"pool":1`), status: 400, code: gateway.CodeInvalidRequest,
			check: func(t *testing.T, r reply) {
				if !strings.Contains(string(r.body), "pool") {
					t.Errorf("the refusal does not name the field: %s", r.body)
				}
			}},
		{name: "a read-only token puts", method: "PUT", path: "/v1/templates/t2", token: aRead, body: tmpl("sandfleet/sandbox:latest", ""), status: 403, code: gateway.CodeForbidden},
		{name: "a read-only token removes", method: "DELETE", path: "/v1/templates/t1", token: aRead, status: 403, code: gateway.CodeForbidden},
	} {
		c.run(t, b, doc)
	}
	// b's own t1, and the operator's image for it: a's is untouched.
	apiCase{method: "PUT", path: "/v1/templates/t1", token: bt, body: tmpl("sandfleet/task-x:1", `,"description":"b's"`), status: 200}.run(t, b, doc)
	apiCase{method: "GET", path: "/v1/templates/t1", token: a, status: 200, check: func(t *testing.T, r reply) {
		if !strings.Contains(string(r.body), `"a's"`) {
			t.Errorf("b's put reached a's t1: %s", r.body)
		}
	}}.run(t, b, doc)
	apiCase{method: "DELETE", path: "/v1/templates/t1", token: bt, status: 204}.run(t, b, doc)
	if got := listed(a); len(got) != 1 {
		t.Errorf("b's delete reached a's: %v", got)
	}
	if got := listed(b.alice); len(got) != 1 {
		t.Errorf("b's delete reached the operator's: %v", got)
	}

	// A job of b's that names a's ID (so that a worker would take it for
	// a's, and look its image up among a's templates) is refused.
	r := b.do(t, "POST", "/v1/jobs", bt, []byte(`{"id":"team-a.forged","image":"t1","code":"print(1)"}`))
	if r.status != 400 || r.errorCode() != gateway.CodeInvalidJob {
		t.Errorf("b's job of a's ID: %d %s", r.status, r.body)
	}

	// The cap: 16 of a tenant's; the 17th is refused, b's are its own.
	for i := 2; i <= 16; i++ {
		apiCase{method: "PUT", path: fmt.Sprintf("/v1/templates/t%d", i), token: a, body: tmpl("sandfleet/sandbox:latest", ""), status: 200}.run(t, b, doc)
	}
	apiCase{name: "the 17th", method: "PUT", path: "/v1/templates/t17", token: a, body: tmpl("sandfleet/sandbox:latest", ""), status: 429, code: gateway.CodeTooManyRequests}.run(t, b, doc)
	apiCase{method: "PUT", path: "/v1/templates/t17", token: bt, body: tmpl("sandfleet/sandbox:latest", ""), status: 200}.run(t, b, doc)
}
