package console_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	topology "github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// fleet is one test's fleet: an in-process JetStream, a worker on the
// fake executor, and a gateway (with its console) on a loopback listener.
type fleet struct {
	url    string
	js     jetstream.JetStream
	client *jobs.Client
	exec   *fakeexec.Executor
	// Tokens: alice may do everything, viewer is read-only (role=read);
	// none when the fleet is open.
	alice, viewer string
}

type options struct {
	open  bool
	slots int
	cfg   gateway.Config // the gateway's, Logger and Tokens set by setup
	// sessions, if set, serves the fleet's sessions: it returns the
	// gateway's client of them.
	sessions func(t testing.TB, js jetstream.JetStream) *sessions.Client
}

func setup(t testing.TB, o options) *fleet {
	t.Helper()
	srv := natstest.Server(t)
	nc, js := natstest.Connect(t, srv.ClientURL())
	topo := topology.Topology{AckWait: 5 * time.Second}
	if _, err := topo.Ensure(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	if o.slots == 0 {
		o.slots = 4
	}
	f := &fleet{exec: &fakeexec.Executor{Pool: &jobs.PoolStatus{Size: 2, Idle: 2, Hits: 5, Misses: 1}}}
	workertest.Start(t, js, f.exec, worker.Config{ID: "w-console", Slots: o.slots, Topology: topo, Version: "v-test"})
	client, err := jobs.NewClient(t.Context(), js, jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	f.client, f.js = client, js
	cfg := o.cfg
	cfg.Logger, cfg.TempDir = slog.New(slog.NewTextHandler(io.Discard, nil)), t.TempDir()
	if o.sessions != nil {
		cfg.Sessions = o.sessions(t, js)
	}
	if !o.open {
		var lines []string
		for _, tk := range []struct {
			name, role string
			secret     *string
		}{{"alice", "", &f.alice}, {"viewer", gateway.RoleRead, &f.viewer}} {
			secret, line, err := gateway.NewTokenRole(tk.name, nil, tk.role)
			if err != nil {
				t.Fatal(err)
			}
			*tk.secret = secret
			lines = append(lines, line)
		}
		if cfg.Tokens, err = gateway.ParseTokens(strings.NewReader(strings.Join(lines, "\n"))); err != nil {
			t.Fatal(err)
		}
	}
	gw, err := gateway.New(client, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ctx, ln, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	f.url = "http://" + ln.Addr().String()
	return f
}

// page is an answer read whole.
type page struct {
	status int
	header http.Header
	body   string
}

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// get fetches path with token as a bearer token ("" for none) and the
// headers given as pairs.
func (f *fleet) get(t testing.TB, path, token string, hdr ...string) page {
	t.Helper()
	return f.do(t, "GET", path, token, nil, hdr...)
}

func (f *fleet) do(t testing.TB, method, path, token string, form url.Values, hdr ...string) page {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, f.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return page{resp.StatusCode, resp.Header, string(data)}
}

// submit runs a job to its end through the Go client.
func (f *fleet) run(t testing.TB, job *jobs.Job) *jobs.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := f.client.SubmitAndWait(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	return res
}
