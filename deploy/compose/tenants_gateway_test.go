package compose

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/natsconn"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// tenantGateway is a gateway holding no operator connection: it serves a
// token of team-a and one of team-b, each over a connection DialTenant made
// with that tenant's credentials file, from a URL that carries the
// submitter's password (which DialTenant must not use).
type tenantGateway struct {
	url        string
	a, b       string                  // the tokens' secrets
	conns      map[string]gateway.Conn // what the gateway serves each tenant through
	violations map[string]chan error   // the permissions violations of each one's connection
}

func startTenantGateway(t *testing.T, s interface{ ClientURL() string }) *tenantGateway {
	t.Helper()
	tg := &tenantGateway{conns: map[string]gateway.Conn{}, violations: map[string]chan error{}}
	var lines []string
	for _, tenant := range []string{"team-a", "team-b"} {
		secret, line, err := gateway.NewTokenWith(tenant+"-ci", gateway.TokenOptions{Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, line)
		if tenant == "team-a" {
			tg.a = secret
		} else {
			tg.b = secret
		}
		creds := filepath.Join(t.TempDir(), tenant+".creds")
		if err := os.WriteFile(creds, []byte("tenant-"+tenant+":"+testTenantPasswords[tenant]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		vio := make(chan error, 64)
		tg.violations[tenant] = vio
		withSubmitter := strings.Replace(s.ClientURL(), "nats://", "nats://submitter:"+testSubmitterPassword+"@", 1)
		c, err := gateway.DialTenant(natsconn.Config{URL: withSubmitter, Name: "gw-" + tenant, Extra: []nats.Option{
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				if errors.Is(err, nats.ErrPermissionViolation) {
					select {
					case vio <- err:
					default:
					}
				}
			})}}, tenant, creds, jobs.Config{CancelWait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.NC.Close)
		tg.conns[tenant] = c
	}
	tokens, err := gateway.ParseTokens(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(nil, nil, gateway.Config{Tokens: tokens, Tenants: tg.conns, Logger: slog.New(slog.DiscardHandler), TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	tg.url = srv.URL
	return tg
}

func (tg *tenantGateway) do(t *testing.T, method, path, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, tg.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// TestGatewayTenantTokens proves, on a server started from the nats.conf
// tenants.sh writes, that a gateway holding only the tenants' credentials
// serves each tenant's token its tenant alone: team-a and team-b submit the
// same ID and each reads its own result, artifacts, events, workspace and
// batch; team-b's token asking for team-a's job, workspace or artifacts by
// their full names, or for the operator's job, learns nothing (404, or its
// own namespace), may not submit into team-a's, and the console shows it
// none of team-a's or the operator's jobs and workspaces. Beneath the
// gateway's own rule, the client it serves team-b through is refused
// team-a's and the operator's data by the server itself, a permissions
// violation naming each subject.
func TestGatewayTenantTokens(t *testing.T) {
	s := startTenantServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wrk := connect(t, s, "worker", testWorkerPassword)
	topo := fleet.Topology{AckWait: 5 * time.Second}
	w := workertest.Start(t, wrk.js, &fakeexec.Executor{}, worker.Config{ID: "shared", Slots: 2, Topology: topo, FetchWait: 200 * time.Millisecond})
	testutil.Eventually(t, 30*time.Second, "the worker's topology", w.Ready)
	// The operator's job, over the submitter's connection.
	sub := connect(t, s, "submitter", testSubmitterPassword)
	op, err := jobs.NewClient(ctx, sub.js, jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := op.SubmitAndWait(ctx, &jobs.Job{ID: "op-1", Image: "python", Code: "print operator-private"}); err != nil || res.Status != jobs.StatusSucceeded {
		t.Fatalf("the operator's job: %v %+v", err, res)
	}
	tg := startTenantGateway(t, s)

	result := func(body string) jobs.Result {
		t.Helper()
		var r jobs.Result
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		return r
	}
	// Each tenant's job of the same ID, with a workspace and an artifact.
	for _, c := range []struct{ token, tenant string }{{tg.a, "team-a"}, {tg.b, "team-b"}} {
		code, body := tg.do(t, "POST", "/v1/jobs?wait=30s", c.token,
			`{"id":"same","image":"python","workspace":"agent","outputs":["*.txt"],"code":"write secret.txt `+c.tenant+`-private\nprint `+c.tenant+`-out"}`)
		if r := result(body); code != 200 || r.ID != c.tenant+".same" || r.Status != jobs.StatusSucceeded || len(r.Artifacts) != 1 {
			t.Fatalf("%s: submit and wait: %d %s", c.tenant, code, body)
		}
	}
	// A's own, through every route that reads.
	if code, body := tg.do(t, "GET", "/v1/jobs/same", tg.a, ""); code != 200 || result(body).ID != "team-a.same" || !strings.Contains(body, "team-a-out") {
		t.Errorf("a reads its job: %d %s", code, body)
	}
	if code, body := tg.do(t, "GET", "/v1/jobs/team-a.same/artifacts/secret.txt", tg.a, ""); code != 200 || body != "team-a-private\n" {
		t.Errorf("a reads its artifact: %d %q", code, body)
	}
	if code, body := tg.do(t, "GET", "/v1/jobs/team-a.same/events", tg.a, ""); code != 200 || !strings.Contains(body, "team-a-out") {
		t.Errorf("a follows its job: %d %.300s", code, body)
	}
	if code, body := tg.do(t, "GET", "/v1/workspaces/agent", tg.a, ""); code != 200 || !strings.Contains(body, `"team-a.agent"`) {
		t.Errorf("a reads its workspace: %d %s", code, body)
	}
	if code, body := tg.do(t, "GET", "/v1/workspaces/agent/snapshot", tg.a, ""); code != 200 || !strings.Contains(body, "team-a-private") {
		t.Errorf("a reads its snapshot: %d %.200s", code, body)
	}
	if code, body := tg.do(t, "POST", "/v1/batches?name=nightly", tg.a, "{\"image\":\"python\",\"code\":\"print one\"}\n{\"image\":\"python\",\"code\":\"print two\"}\n"); code != 200 ||
		!strings.Contains(body, `"done":2`) || !strings.Contains(body, `"id":"team-a.`) {
		t.Errorf("a runs a batch: %d %s", code, body)
	}

	t.Run("b reaches nothing of a's or the operator's over HTTP", func(t *testing.T) {
		for _, path := range []string{
			"/v1/jobs/team-a.same", "/v1/jobs/team-a.same?wait=1s", "/v1/jobs/team-a.same/events",
			"/v1/jobs/team-a.same/artifacts", "/v1/jobs/team-a.same/artifacts/secret.txt",
			"/v1/workspaces/team-a.agent", "/v1/workspaces/team-a.agent/snapshot",
		} {
			if code, body := tg.do(t, "GET", path, tg.b, ""); code != 404 || strings.Contains(body, "team-a-") {
				t.Errorf("GET %s: %d %.200s; want 404", path, code, body)
			}
		}
		if code, body := tg.do(t, "POST", "/v1/jobs/team-a.same/cancel", tg.b, ""); code != 404 {
			t.Errorf("cancel a's job: %d %s", code, body)
		}
		// The operator's ID names b's own job of that ID, which b never
		// sent: queued for all a tenant can tell, never the operator's.
		if code, body := tg.do(t, "GET", "/v1/jobs/op-1", tg.b, ""); code != 202 || !strings.Contains(body, `"team-b.op-1"`) || strings.Contains(body, "operator-private") {
			t.Errorf("GET the operator's ID: %d %s", code, body)
		}
		for _, body := range []string{
			`{"id":"team-a.forged","image":"python","code":"print x"}`,
			`{"image":"python","workspace":"team-a.agent","code":"cat secret.txt"}`,
			`{"image":"python","workspace_from":{"name":"team-a.agent"},"code":"cat secret.txt"}`,
		} {
			if code, resp := tg.do(t, "POST", "/v1/jobs?wait=5s", tg.b, body); code != 400 || !strings.Contains(resp, "invalid_job") {
				t.Errorf("b submits %s: %d %s; want 400 invalid_job", body, code, resp)
			}
		}
		if code, body := tg.do(t, "GET", "/v1/status", tg.b, ""); code != 403 {
			t.Errorf("b reads the fleet's status: %d %s", code, body)
		}
		if code, body := tg.do(t, "GET", "/v1/jobs/same", tg.b, ""); code != 200 || !strings.Contains(body, "team-b-out") || strings.Contains(body, "team-a-") {
			t.Errorf("b reads its own: %d %s", code, body)
		}
	})

	t.Run("the console shows b only b's", func(t *testing.T) {
		if code, body := tg.do(t, "GET", "/jobs?q=team-a.same", tg.b, ""); code != 200 || strings.Contains(body, "team-a-") {
			t.Errorf("console search of a's ID: %d\n%.1500s", code, body)
		}
		for _, path := range []string{"/", "/jobs", "/batches", "/workspaces"} {
			code, body := tg.do(t, "GET", path, tg.b, "")
			if code != 200 || strings.Contains(body, "team-a") || strings.Contains(body, "op-1") || strings.Contains(body, "operator-private") {
				t.Errorf("console %s: %d\n%.1500s", path, code, body)
			}
		}
		if _, body := tg.do(t, "GET", "/workspaces", tg.b, ""); !strings.Contains(body, "team-b.agent") {
			t.Errorf("b's workspace list lacks its own:\n%.1500s", body)
		}
		for _, path := range []string{"/jobs/team-a.same", "/workspaces/team-a.agent", "/batches/nightly"} {
			if code, body := tg.do(t, "GET", path, tg.b, ""); code != 404 || strings.Contains(body, "team-a-") {
				t.Errorf("console %s: %d\n%.1500s", path, code, body)
			}
		}
		if code, body := tg.do(t, "GET", "/jobs/same", tg.b, ""); code != 200 || !strings.Contains(body, "team-b-out") {
			t.Errorf("b's own job page: %d\n%.1500s", code, body)
		}
	})

	t.Run("the client serving b is refused a's data by the server", func(t *testing.T) {
		b := tg.conns["team-b"].Client
		vio := tg.violations["team-b"]
		expect := func(what, part string) {
			t.Helper()
			deadline := time.After(5 * time.Second)
			for {
				select {
				case err := <-vio:
					if strings.Contains(err.Error(), part) {
						return
					}
				case <-deadline:
					t.Errorf("%s: no permissions violation naming %s", what, part)
					return
				}
			}
		}
		short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 1500*time.Millisecond) }
		cctx, done := short()
		if r, err := b.Get(cctx, "team-a.same"); err == nil {
			t.Errorf("b's client read a's result: %+v", r)
		}
		done()
		expect("a's result", "$KV.RESULTS.team-a.same")
		cctx, done = short()
		if r, err := b.Get(cctx, "op-1"); err == nil {
			t.Errorf("b's client read the operator's result: %+v", r)
		}
		done()
		expect("the operator's result", "$KV.RESULTS.op-1")
		cctx, done = short()
		if _, err := b.Status(cctx); err == nil {
			t.Error("b's client read the fleet's status")
		}
		done()
		cctx, done = short()
		if rw, err := b.WatchResults(cctx); err != nil {
			t.Errorf("b's client cannot watch its own results: %v", err)
		} else {
			rw.Stop()
		}
		done()
	})
}
