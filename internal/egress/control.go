package egress

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/sandfleet/sandfleet/pkg/limits"
)

// The control API, by which the worker tells the proxy which sandbox
// (container ID) has which address and policy, and takes back what it
// carried. It is served on the proxy's outside network only: connections
// from the sandboxes' network are refused, and every request carries the
// token the worker gave the proxy at its start.
//
//	PUT    /v1/sandboxes/{id}   {"ip": "172.18.0.5", "network": {...}}  204
//	PUT    /v1/sandboxes/{id}/network  {"network": {...}, "secrets": [...]}  204
//	GET    /v1/sandboxes/{id}   200 {"egress": [NetworkUse...]}
//	DELETE /v1/sandboxes/{id}   200 {"egress": [NetworkUse...]}
//	GET    /v1/healthz          200 {"instance": "...", "ca_sha256": "..."}
//	GET    /v1/ca               200 the fleet CA's certificate, PEM
type registration struct {
	IP      netip.Addr      `json:"ip"`
	Network *limits.Network `json:"network"`
	Secrets []Secret        `json:"secrets,omitempty"`
}

type update struct {
	Network *limits.Network `json:"network"`
	Secrets []Secret        `json:"secrets,omitempty"`
}

// Health is what the proxy says of itself: Instance is new at each of its
// starts (a restarted proxy has forgotten every registration), CA is its
// fleet CA's Fingerprint ("" for none).
type Health struct {
	Instance string `json:"instance"`
	CA       string `json:"ca_sha256,omitempty"`
}

type released struct {
	Egress []limits.NetworkUse `json:"egress"`
}

// ControlHandler serves the control API for p. from is the sandboxes'
// network, whose connections are refused.
func ControlHandler(p *Proxy, token string, from netip.Prefix) http.Handler {
	mux := http.NewServeMux()
	health := Health{Instance: randHex(8)}
	if p.CA != nil {
		health.CA = p.CA.Fingerprint()
	}
	mux.HandleFunc("GET /v1/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(health)
	})
	mux.HandleFunc("GET /v1/ca", func(w http.ResponseWriter, r *http.Request) {
		if p.CA == nil {
			http.Error(w, "no CA", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/x-pem-file")
		w.Write(p.CA.PEM)
	})
	mux.HandleFunc("PUT /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		var reg registration
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&reg); err != nil || !reg.IP.IsValid() {
			http.Error(w, fmt.Sprintf("bad registration: %v", err), http.StatusBadRequest)
			return
		}
		if err := p.Register(r.PathValue("id"), reg.IP, reg.Network, reg.Secrets); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("PUT /v1/sandboxes/{id}/network", func(w http.ResponseWriter, r *http.Request) {
		var u update
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&u); err != nil {
			http.Error(w, fmt.Sprintf("bad update: %v", err), http.StatusBadRequest)
			return
		}
		if err := p.Update(r.PathValue("id"), u.Network, u.Secrets); errors.Is(err, errNoSandbox) {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		} else if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		use, ok := p.Usage(r.PathValue("id"))
		if !ok {
			http.Error(w, "no such sandbox", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(released{Egress: use})
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		use, ok := p.Release(r.PathValue("id"))
		if !ok {
			http.Error(w, "no such sandbox", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(released{Egress: use})
	})
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err != nil || from.Contains(ap.Addr().Unmap()) {
			http.Error(w, "not from the sandboxes' network", http.StatusForbidden)
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// Ports of the proxy in its container.
const (
	ProxyPort   = 3128 // the sandboxes' proxy, on the internal network
	ControlPort = 3129 // the worker's control API, on the outside network
)

// Control is the worker's client of a proxy's control API.
type Control struct {
	URL   string // http://ADDR of the control API
	Token string
	HTTP  *http.Client // nil: one with a 10s timeout
}

// controlHTTP is Control's client by default. A call closes its
// connection: a connection kept for the next call would outlive a proxy's
// restart, and a transport of a call's own (as it once was) kept every
// call's connection, an fd and two goroutines, open for the worker's life.
var controlHTTP = &http.Client{Timeout: 10 * time.Second,
	Transport: &http.Transport{Proxy: nil, DialContext: (&net.Dialer{}).DialContext, DisableKeepAlives: true}}

func (c *Control) do(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	hc := c.HTTP
	if hc == nil {
		hc = controlHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("egress proxy: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return &statusError{code: resp.StatusCode, msg: fmt.Sprintf("egress proxy: %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(msg))}
	}
	if raw, ok := out.(*rawBody); ok {
		*raw.b, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return err
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

// The control API's answers a worker acts on, told apart with errors.Is.
var (
	// ErrUnknownSandbox: the proxy has no such sandbox (404), as after
	// its restart, which forgets every registration.
	ErrUnknownSandbox = errors.New("egress proxy: no such sandbox")
	// ErrRegistered: the sandbox is registered already (409).
	ErrRegistered = errors.New("egress proxy: sandbox registered already")
)

// statusError is the control API's answer other than 2xx.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

// Is makes the answers ErrUnknownSandbox and ErrRegistered mean: a 404
// or a 409.
func (e *statusError) Is(target error) bool {
	switch target {
	case ErrUnknownSandbox:
		return e.code == http.StatusNotFound
	case ErrRegistered:
		return e.code == http.StatusConflict
	}
	return false
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// rawBody takes a response's body as it is.
type rawBody struct{ b *[]byte }

// Healthy reports whether the proxy answers.
func (c *Control) Healthy(ctx context.Context) error {
	_, err := c.Health(ctx)
	return err
}

// Health returns what the proxy says of itself.
func (c *Control) Health(ctx context.Context) (Health, error) {
	var h Health
	err := c.do(ctx, http.MethodGet, "/v1/healthz", nil, &h)
	return h, err
}

// Register sets the policy of the sandbox id at ip, and the secrets it
// names.
func (c *Control) Register(ctx context.Context, id string, ip netip.Addr, n *limits.Network, secrets []Secret) error {
	if n.None() {
		return errors.New("egress: no network to register")
	}
	return c.do(ctx, http.MethodPut, "/v1/sandboxes/"+id, registration{IP: ip, Network: n, Secrets: secrets}, nil)
}

// Update replaces the policy of the sandbox id; n may grant nothing.
func (c *Control) Update(ctx context.Context, id string, n *limits.Network, secrets []Secret) error {
	return c.do(ctx, http.MethodPut, "/v1/sandboxes/"+id+"/network", update{Network: n, Secrets: secrets}, nil)
}

// Usage returns what the sandbox id's connections carried so far.
func (c *Control) Usage(ctx context.Context, id string) ([]limits.NetworkUse, error) {
	var r released
	err := c.do(ctx, http.MethodGet, "/v1/sandboxes/"+id, nil, &r)
	return r.Egress, err
}

// CA returns the fleet CA's certificate, PEM.
func (c *Control) CA(ctx context.Context) ([]byte, error) {
	var pemBytes []byte
	err := c.do(ctx, http.MethodGet, "/v1/ca", nil, &rawBody{&pemBytes})
	return pemBytes, err
}

// Release forgets the sandbox id and returns what its connections carried.
func (c *Control) Release(ctx context.Context, id string) ([]limits.NetworkUse, error) {
	var r released
	err := c.do(ctx, http.MethodDelete, "/v1/sandboxes/"+id, nil, &r)
	return r.Egress, err
}
