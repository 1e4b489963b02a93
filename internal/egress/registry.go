package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandfleet/sandfleet/pkg/limits"
)

// The sandboxes the proxy serves, by their address on the internal
// network: registered, updated and released through the control API.

// sandboxEntry is one registered sandbox: its policy, its connections and
// what they carried.
type sandboxEntry struct {
	id    string
	ip    netip.Addr
	state atomic.Pointer[entryState] // its policy now: a session's may change
	tr    *http.Transport
	tlsTr *http.Transport // to the hosts of its secrets, verified
	conns atomic.Int64

	mu     sync.Mutex
	closed bool
	open   map[net.Conn]struct{}
	use    accounting
}

// entryState is a sandbox's policy and the secrets it names, replaced
// whole when a session's policy changes.
type entryState struct {
	pol     policy
	secrets []Secret
}

func (e *sandboxEntry) policy() policy { return e.state.Load().pol }

// Register sets the policy of the sandbox id at ip, with the secrets its
// policy names; a later registration of ip (its address given to another
// sandbox) replaces it.
func (p *Proxy) Register(id string, ip netip.Addr, n *limits.Network, secrets []Secret) error {
	if n.None() {
		return errors.New("a sandbox registered with no network")
	}
	if len(secrets) > 0 && p.CA == nil {
		return errors.New("a sandbox with secrets, and the proxy has no CA to intercept their hosts with")
	}
	ip = ip.Unmap()
	e := &sandboxEntry{id: id, ip: ip, open: map[net.Conn]struct{}{}}
	e.state.Store(&entryState{pol: policy{net: n, protect: p.Protect, forbid: p.Forbid}, secrets: secrets})
	transport := func() *http.Transport {
		return &http.Transport{
			Proxy:                 nil, // never the proxy's own environment
			DialContext:           func(ctx context.Context, _, addr string) (net.Conn, error) { return p.dialHTTP(ctx, e, addr) },
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       30 * time.Second,
			DisableCompression:    true,
			ResponseHeaderTimeout: 5 * time.Minute,
			TLSHandshakeTimeout:   dialTimeout,
		}
	}
	e.tr = transport()
	e.tlsTr = transport()
	e.tlsTr.TLSClientConfig = &tls.Config{RootCAs: p.Roots, MinVersion: tls.VersionTLS12}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byIP == nil {
		p.byIP, p.byID = map[netip.Addr]*sandboxEntry{}, map[string]*sandboxEntry{}
	}
	if old := p.byID[id]; old != nil {
		return fmt.Errorf("sandbox %s is registered already", id)
	}
	p.byIP[ip], p.byID[id] = e, e
	return nil
}

// Update replaces the policy of the registered sandbox id (a session's,
// changed while it runs): n may grant nothing ("install, then lock").
// The sandbox's connections are closed, so that none opened under the
// old policy outlives it; its accounting goes on.
func (p *Proxy) Update(id string, n *limits.Network, secrets []Secret) error {
	if len(secrets) > 0 && p.CA == nil {
		return errors.New("a sandbox with secrets, and the proxy has no CA to intercept their hosts with")
	}
	if n == nil {
		n = &limits.Network{}
	}
	p.mu.Lock()
	e := p.byID[id]
	p.mu.Unlock()
	if e == nil {
		return errNoSandbox
	}
	e.state.Store(&entryState{pol: policy{net: n, protect: p.Protect, forbid: p.Forbid}, secrets: secrets})
	e.tr.CloseIdleConnections()
	e.tlsTr.CloseIdleConnections()
	e.mu.Lock()
	for c := range e.open {
		c.Close()
	}
	e.mu.Unlock()
	return nil
}

// errNoSandbox: no sandbox is registered under the ID.
var errNoSandbox = errors.New("no such sandbox")

// Usage returns what the sandbox id's connections carried so far.
func (p *Proxy) Usage(id string) ([]limits.NetworkUse, bool) {
	p.mu.Lock()
	e := p.byID[id]
	p.mu.Unlock()
	if e == nil {
		return nil, false
	}
	return e.usage(), true
}

// Release forgets the sandbox id, closes its connections and returns what
// they carried, sorted by host.
func (p *Proxy) Release(id string) ([]limits.NetworkUse, bool) {
	p.mu.Lock()
	e := p.byID[id]
	if e != nil {
		delete(p.byID, id)
		if p.byIP[e.ip] == e {
			delete(p.byIP, e.ip)
		}
	}
	p.mu.Unlock()
	if e == nil {
		return nil, false
	}
	e.tr.CloseIdleConnections()
	e.tlsTr.CloseIdleConnections()
	e.mu.Lock()
	e.closed = true
	for c := range e.open {
		c.Close()
	}
	e.mu.Unlock()
	return e.usage(), true
}

func (p *Proxy) lookup(ip netip.Addr) *sandboxEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byIP[ip.Unmap()]
}

// track holds c among e's connections, or says e is gone.
func (e *sandboxEntry) track(c net.Conn) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.open[c] = struct{}{}
	return true
}

func (e *sandboxEntry) untrack(c net.Conn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.open, c)
}
