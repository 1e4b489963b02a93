package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// bundle is a fleet for one test: an in-process JetStream server, a worker
// on the fake executor serving the default queue, and a gateway on a real
// loopback listener with its own http.Server (the one Server builds).
type bundle struct {
	url    string
	gw     *gateway.Gateway
	client *jobs.Client
	exec   *fakeexec.Executor
	js     jetstream.JetStream // the fleet's, as an operator would reach it
	// Tokens: alice may use every queue, bob only "default".
	alice, bob string
	// tenant and tenantRead are a read-write and a read-only token of
	// each of options.tenants, served by a client of that tenant.
	tenant, tenantRead map[string]string
}

type options struct {
	cfg  gateway.Config
	topo fleet.Topology
	open bool // no tokens
	// tenants get tokens of their own (bundle.tenant, bundle.tenantRead),
	// each served over a connection of its own with its tenant's client
	// (the server here grants every connection everything: the scope is
	// the gateway's to keep).
	tenants []string
	// srv, if set, is the server to use (else one of the test's own).
	srv *server.Server
}

func setup(t testing.TB, o options) *bundle {
	t.Helper()
	srv := o.srv
	if srv == nil {
		srv = natstest.Server(t)
	}
	nc, js := natstest.Connect(t, srv.ClientURL())
	if _, err := o.topo.Ensure(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	b := &bundle{exec: &fakeexec.Executor{}, js: js}
	workertest.Start(t, js, b.exec, worker.Config{ID: "w1", Slots: 8, Topology: o.topo})
	client, err := jobs.NewClient(t.Context(), js, jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b.client = client
	if !o.open {
		var lines []string
		for _, tk := range []struct {
			name   string
			queues []string
			secret *string
		}{{"alice", nil, &b.alice}, {"bob", []string{"default"}, &b.bob}} {
			secret, line, err := gateway.NewToken(tk.name, tk.queues)
			if err != nil {
				t.Fatal(err)
			}
			*tk.secret = secret
			lines = append(lines, line)
		}
		b.tenant, b.tenantRead = map[string]string{}, map[string]string{}
		for _, tenant := range o.tenants {
			for _, role := range []string{"", gateway.RoleRead} {
				secret, line, err := gateway.NewTokenWith(tenant+"-"+role+"tok", gateway.TokenOptions{Tenant: tenant, Role: role})
				if err != nil {
					t.Fatal(err)
				}
				lines = append(lines, line)
				if role == "" {
					b.tenant[tenant] = secret
				} else {
					b.tenantRead[tenant] = secret
				}
			}
			tnc, tjs := natstest.Connect(t, srv.ClientURL(), jobs.TenantOptions(tenant)...)
			tc, err := jobs.NewTenantClient(tjs, tenant, jobs.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if o.cfg.Tenants == nil {
				o.cfg.Tenants = map[string]gateway.Conn{}
			}
			o.cfg.Tenants[tenant] = gateway.Conn{Client: tc, NC: tnc}
		}
		o.cfg.Tokens, err = gateway.ParseTokens(strings.NewReader(strings.Join(lines, "\n")))
		if err != nil {
			t.Fatal(err)
		}
	}
	if o.cfg.Logger == nil {
		o.cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	o.cfg.TempDir = t.TempDir()
	b.gw, err = gateway.New(client, nc, o.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.gw.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.gw.Serve(ctx, ln, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	b.url = "http://" + ln.Addr().String()
	return b
}

// reply is a response read whole.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// errorCode returns the code of an error body, "" for any other body.
func (r reply) errorCode() gateway.Code {
	var e struct {
		Error gateway.ErrorBody `json:"error"`
	}
	if json.Unmarshal(r.body, &e) != nil {
		return ""
	}
	return e.Error.Code
}

func (r reply) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// do sends a request and reads the whole answer.
func (b *bundle) do(t testing.TB, method, path, token string, body []byte, hdr ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, b.url+path, rd)
	if err != nil {
		t.Fatal(err)
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
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, data}
}

// submit queues a job through the gateway, waiting for its result when
// wait is set, and returns the reply.
func (b *bundle) submit(t testing.TB, job string, wait string) reply {
	t.Helper()
	path := "/v1/jobs"
	if wait != "" {
		path += "?wait=" + wait
	}
	return b.do(t, "POST", path, b.alice, []byte(job))
}
