package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/sessionhost"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// idleSandbox is a session's sandbox that holds its slot and answers
// nothing: enough for what a session's record and caps are.
type idleSandbox struct{ done chan struct{} }

func (s *idleSandbox) Do(context.Context, *envelope.Request) (*envelope.Reply, error) {
	return nil, errors.New("no calls here")
}
func (s *idleSandbox) Close(context.Context) { close(s.done) }
func (s *idleSandbox) Done() <-chan struct{} { return s.done }
func (s *idleSandbox) Why() string           { return "" }
func (s *idleSandbox) ImageID() string       { return "sha256:idle" }
func (s *idleSandbox) Archive(context.Context, io.Writer) (*envelope.ArchiveReport, error) {
	return nil, errors.New("no files")
}

// sessionBundle is a gateway serving sessions, over a session host whose
// sandboxes are idle ones, with tokens of the tenants acme and globex.
func sessionBundle(t *testing.T, cfg sessionhost.Config) (*bundle, jetstream.JetStream) {
	t.Helper()
	return sessionBundleOn(t, cfg, func() sessionhost.Sandbox { return &idleSandbox{done: make(chan struct{})} })
}

// sessionBundleOn is sessionBundle whose sessions run in the sandboxes
// sandbox makes.
func sessionBundleOn(t *testing.T, cfg sessionhost.Config, sandbox func() sessionhost.Sandbox) (*bundle, jetstream.JetStream) {
	t.Helper()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	start := func(context.Context, sessionhost.StartSpec) (sessionhost.Sandbox, error) {
		return sandbox(), nil
	}
	cfg.Worker = "w1"
	cfg.Limits = func(_, _ string, l limits.Limits) (limits.Limits, error) {
		return limits.Resolve(l, limits.Default(), limits.DefaultCaps())
	}
	h, err := sessionhost.New(t.Context(), js, start, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	// The gateway's sessions client gets a connection of its own: what
	// it reads is counted on it alone.
	_, gjs := natstest.Connect(t, srv.ClientURL())
	sc, err := sessions.NewClient(t.Context(), gjs, "")
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, options{srv: srv, cfg: gateway.Config{Sessions: sc}, tenants: []string{"acme", "globex"}})
	return b, gjs
}

func createSession(t *testing.T, b *bundle, token, body string) reply {
	t.Helper()
	var rep reply
	testutil.Eventually(t, 10*time.Second, "a create answered by the host", func() bool {
		rep = b.do(t, "POST", "/v1/sessions", token, []byte(body), "Content-Type", "application/json")
		return rep.status != http.StatusTooManyRequests || rep.errorCode() != gateway.CodeTooManyRequests
	})
	return rep
}

// One token cannot hold every session slot: at its cap of live sessions a
// create is refused 429 session_cap naming the cap, while another
// tenant's token still creates one; a max_lifetime or idle_timeout over
// its cap is refused 400 naming it.
func TestSessionCapsPerTokenAndTenant(t *testing.T) {
	t.Parallel()
	b, _ := sessionBundle(t, sessionhost.Config{Max: 16, MaxPerToken: 3, MaxPerTenant: 5})
	for i := range 3 {
		if rep := createSession(t, b, b.tenant["acme"], `{"max_lifetime": "23h"}`); rep.status != http.StatusCreated {
			t.Fatalf("create %d: %d %s", i, rep.status, rep.body)
		}
	}
	rep := createSession(t, b, b.tenant["acme"], `{"max_lifetime": "23h"}`)
	var body struct {
		Error gateway.ErrorBody `json:"error"`
	}
	rep.decode(t, &body)
	if rep.status != http.StatusTooManyRequests || body.Error.Code != gateway.CodeSessionCap || body.Error.Cap != sessionapi.CapPerToken {
		t.Fatalf("a token past its cap: %d %s, want 429 session_cap sessions_per_token", rep.status, rep.body)
	}
	if rep := createSession(t, b, b.tenant["globex"], `{}`); rep.status != http.StatusCreated {
		t.Fatalf("another tenant's create: %d %s", rep.status, rep.body)
	}
	for _, tc := range []struct{ body, cap string }{
		{`{"max_lifetime": "48h"}`, sessionapi.CapMaxLifetime},
		{`{"idle_timeout": "3h"}`, sessionapi.CapIdleTimeout},
	} {
		rep := createSession(t, b, b.tenant["globex"], tc.body)
		rep.decode(t, &body)
		if rep.status != http.StatusBadRequest || body.Error.Code != gateway.CodeSessionCap || body.Error.Cap != tc.cap {
			t.Errorf("%s: %d %s, want 400 session_cap %s", tc.body, rep.status, rep.body, tc.cap)
		}
	}
	// A deleted session frees its place under the cap.
	var list gateway.SessionList
	b.do(t, "GET", "/v1/sessions", b.tenant["acme"], nil).decode(t, &list)
	if len(list.Sessions) != 3 {
		t.Fatalf("acme's token lists %d sessions, want its 3", len(list.Sessions))
	}
	if rep := b.do(t, "DELETE", "/v1/sessions/"+list.Sessions[0].ID, b.tenant["acme"], nil); rep.status != http.StatusOK {
		t.Fatalf("delete: %d %s", rep.status, rep.body)
	}
	if rep := createSession(t, b, b.tenant["acme"], `{}`); rep.status != http.StatusCreated {
		t.Fatalf("a create after a delete: %d %s", rep.status, rep.body)
	}
}

// Labels are bounded as a job's, and in all: a create past them is 400
// with a message naming the labels, before any sandbox starts.
func TestSessionLabelsBounded(t *testing.T) {
	t.Parallel()
	b, _ := sessionBundle(t, sessionhost.Config{})
	big := strings.Repeat("x", 1000)
	var many []string
	for i := range 10 {
		many = append(many, fmt.Sprintf("%q: %q", fmt.Sprint("k", i), big))
	}
	for name, labels := range map[string]string{
		"a value of 58 KiB":   fmt.Sprintf(`{"k": %q}`, strings.Repeat("x", 58<<10)),
		"10 KB in all":        "{" + strings.Join(many, ",") + "}",
		"a control character": `{"k": "a\u0007"}`,
		"a key of 200 bytes":  fmt.Sprintf(`{%q: "v"}`, strings.Repeat("k", 200)),
	} {
		rep := createSession(t, b, b.tenant["acme"], `{"labels": `+labels+`}`)
		if rep.status != http.StatusBadRequest || rep.errorCode() != gateway.CodeInvalidRequest || !strings.Contains(string(rep.body), "labels") {
			t.Errorf("%s: %d %s, want 400 invalid_request naming the labels", name, rep.status, rep.body)
		}
	}
	if rep := createSession(t, b, b.tenant["acme"], `{"labels": {"task": "t-1"}}`); rep.status != http.StatusCreated {
		t.Fatalf("a create with small labels: %d %s", rep.status, rep.body)
	}
}

// A list reads its owner's records alone: another tenant's token with
// many large records (ended, kept two days) does not add a byte to what
// the list fetches.
func TestSessionListReadsItsOwnersRecordsAlone(t *testing.T) {
	t.Parallel()
	b, gjs := sessionBundle(t, sessionhost.Config{Max: 64, MaxPerToken: -1, MaxPerTenant: -1})
	nc := gjs.Conn()
	if rep := createSession(t, b, b.tenant["acme"], `{}`); rep.status != http.StatusCreated {
		t.Fatalf("create: %d %s", rep.status, rep.body)
	}
	listBytes := func() uint64 {
		before := nc.Stats().InBytes
		var list gateway.SessionList
		rep := b.do(t, "GET", "/v1/sessions", b.tenant["acme"], nil)
		rep.decode(t, &list)
		if len(list.Sessions) != 1 {
			t.Fatalf("acme lists %d sessions, want its one: %s", len(list.Sessions), rep.body)
		}
		return nc.Stats().InBytes - before
	}
	alone := listBytes()
	labels := make([]string, 3)
	for i := range labels {
		labels[i] = fmt.Sprintf("%q: %q", fmt.Sprint("k", i), strings.Repeat("x", 1000))
	}
	for range 40 { // globex churns sessions with the largest labels
		rep := createSession(t, b, b.tenant["globex"], `{"labels": {`+strings.Join(labels, ",")+`}}`)
		var info sessions.Info
		rep.decode(t, &info)
		if rep := b.do(t, "DELETE", "/v1/sessions/"+info.ID, b.tenant["globex"], nil); rep.status != http.StatusOK {
			t.Fatalf("delete: %d %s", rep.status, rep.body)
		}
	}
	after := listBytes()
	t.Logf("acme's list fetched %d bytes alone, %d beside globex's 40 records of 3 KB", alone, after)
	if after > alone+1024 {
		t.Fatalf("acme's list fetched %d bytes beside globex's records, %d without: it read another owner's records", after, alone)
	}
}
