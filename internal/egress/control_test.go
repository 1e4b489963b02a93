package egress

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// The control API takes only the worker's token, never a request from the
// sandboxes' network, and registers and releases sandboxes by ID.
func TestControlAPI(t *testing.T) {
	t.Parallel()
	p := &Proxy{Resolver: &Resolver{}, Protect: Protected}
	srv := httptest.NewServer(ControlHandler(p, "secret", netip.MustParsePrefix("10.99.0.0/16")))
	defer srv.Close()
	ctx := context.Background()
	n := policyOf(t, false, "a.example.test")
	if err := (&Control{URL: srv.URL, Token: "wrong"}).Register(ctx, "s1", netip.MustParseAddr("10.99.0.5"), n, nil); err == nil ||
		!strings.Contains(err.Error(), "401") {
		t.Fatalf("a wrong token: %v", err)
	}
	c := &Control{URL: srv.URL, Token: "secret"}
	if err := c.Register(ctx, "s1", netip.MustParseAddr("10.99.0.5"), n, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Register(ctx, "s1", netip.MustParseAddr("10.99.0.6"), n, nil); !errors.Is(err, ErrRegistered) {
		t.Fatalf("a second registration of one sandbox: %v", err)
	}
	if e := p.lookup(netip.MustParseAddr("10.99.0.5")); e == nil || e.id != "s1" {
		t.Fatalf("registered sandbox not found by its address: %+v", e)
	}
	use, err := c.Release(ctx, "s1")
	if err != nil || len(use) != 0 {
		t.Fatalf("release: %v %+v", err, use)
	}
	if _, err := c.Release(ctx, "s1"); !errors.Is(err, ErrUnknownSandbox) {
		t.Fatalf("a second release: %v", err)
	}

	// From the sandboxes' network, even with the token.
	h := ControlHandler(p, "secret", netip.MustParsePrefix("192.0.2.0/24"))
	req := httptest.NewRequest("GET", "/v1/healthz", nil)
	req.RemoteAddr = "192.0.2.7:40000"
	req.Header.Set("Authorization", "Bearer secret")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Fatalf("a request from the sandboxes' network: %d", rec.Code)
	}
}

// The proxy's health names its process and its CA, and a CA handed to a
// proxy (as the worker does at each of its starts) is the one it shows.
func TestControlHealthNamesInstanceAndCA(t *testing.T) {
	t.Parallel()
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	b, err := ca.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseCA(b)
	if err != nil {
		t.Fatal(err)
	}
	if again.Fingerprint() != ca.Fingerprint() || string(again.PEM) != string(ca.PEM) {
		t.Fatal("ParseCA(MarshalPEM()) is another CA")
	}
	if _, err := again.leaf("a.example.test"); err != nil {
		t.Fatalf("the parsed CA cannot sign: %v", err)
	}
	if _, err := ParseCA(ca.PEM); err == nil {
		t.Error("ParseCA took a certificate without its key")
	}
	health := func() Health {
		srv := httptest.NewServer(ControlHandler(&Proxy{CA: again}, "tok", netip.MustParsePrefix("10.231.0.0/16")))
		defer srv.Close()
		h, err := (&Control{URL: srv.URL, Token: "tok"}).Health(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	first, second := health(), health()
	if first.CA != ca.Fingerprint() || first.Instance == "" || first.Instance == second.Instance {
		t.Errorf("health %+v then %+v: want the CA %s and a new instance each start", first, second, ca.Fingerprint())
	}
}
