package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandfleet/sandfleet/pkg/limits"
)

// Bounds of the proxy, per sandbox and per connection.
const (
	maxConnsPerSandbox = 256              // connections of one sandbox at once; past it, refused
	headerTimeout      = 30 * time.Second // a request's head, or a ClientHello, within this
	dialTimeout        = 10 * time.Second
	maxHelloBytes      = 64 << 10
	maxHeadBytes       = 64 << 10 // a request's head (what the connection's reader holds)
	maxRefusing        = 1024     // refused connections whose request is read at once
)

// Proxy is the egress proxy: the one endpoint a sandbox with a network can
// reach. It serves HTTP proxy requests (absolute-form, checked by host)
// and CONNECT tunnels (to a host name only for TLS whose SNI is that
// name; to an address only where an address rule, or open egress, allows
// it), each under the policy registered for the sandbox's address.
type Proxy struct {
	Resolver *Resolver
	Protect  []netip.Prefix // the protected ranges: Protected and what the gateway adds
	// Forbid are ranges no rule opens, not even an exact one: the
	// sandboxes' networks and the proxy's own addresses (ForbiddenFor).
	Forbid []netip.Prefix
	Log    *slog.Logger
	// CA signs the certificates of the hosts the proxy intercepts, those
	// a sandbox's secrets are for; nil: no sandbox may have secrets.
	CA *CA
	// Roots verify the real hosts of intercepted tunnels; nil: the
	// system's.
	Roots *x509.CertPool

	refusing atomic.Int64 // refused connections being read (serveConn)

	mu     sync.Mutex
	byIP   map[netip.Addr]*sandboxEntry
	byID   map[string]*sandboxEntry
	dialer net.Dialer
}

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

// Serve accepts sandboxes' connections on l until it is closed.
func (p *Proxy) Serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return err
		}
		go p.serveConn(c)
	}
}

// refuse answers a request with 403 and the reason, for the program to
// show: a denial is an answer, never a hang.
//
// The reason is in the status line too: a client refused a CONNECT shows
// that line, not the body (Go's "Forbidden by sandfleet egress: ...",
// Python's "Tunnel connection failed: 403 ...").
func refuse(w io.Writer, reason string) { answer(w, 403, "Forbidden by sandfleet egress: ", reason) }

func badGateway(w io.Writer, reason string) { answer(w, 502, "Bad Gateway: ", reason) }

func answer(w io.Writer, code int, phrase, reason string) {
	body := "sandfleet egress: " + reason + "\n"
	line := strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, phrase+reason)
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nX-Sandfleet-Egress: denied\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		code, line, len(body), body)
}

// peekHost returns the Host header lines of the request at the head of
// br without consuming it: http.ReadRequest drops them for a request
// whose URL names a host, and the proxy must see when they differ.
func peekHost(br *bufio.Reader) ([]string, error) {
	for {
		if br.Buffered() == 0 {
			if _, err := br.Peek(1); err != nil {
				return nil, err
			}
		}
		b, _ := br.Peek(br.Buffered())
		if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
			var hosts []string
			for _, line := range strings.Split(string(b[:i]), "\r\n")[1:] {
				if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "host") {
					hosts = append(hosts, strings.TrimSpace(v))
				}
			}
			return hosts, nil
		}
		if br.Buffered() >= br.Size() {
			return nil, errors.New("request head too large")
		}
		if _, err := br.Peek(br.Buffered() + 1); err != nil {
			return nil, err
		}
	}
}

func (p *Proxy) serveConn(c net.Conn) {
	defer c.Close()
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return
	}
	// A refusal answers the client's request, read first: an answer
	// before it is one the client may take for a stale connection's.
	// Its head is read within the bound of an accepted one's (Go's
	// ReadRequest alone reads a header line without end), and past
	// maxRefusing such reads at once a refused connection is closed
	// unread: a sandbox may open connections faster than they time out.
	refuseFirst := func(reason string) {
		if p.refusing.Add(1) > maxRefusing {
			p.refusing.Add(-1)
			return
		}
		defer p.refusing.Add(-1)
		c.SetReadDeadline(time.Now().Add(headerTimeout))
		if _, err := http.ReadRequest(bufio.NewReader(io.LimitReader(c, maxHeadBytes))); err == nil {
			refuse(c, reason)
		}
	}
	e := p.lookup(ap.Addr())
	if e == nil {
		refuseFirst("no sandbox with a network has the address " + ap.Addr().String())
		return
	}
	if e.conns.Add(1) > maxConnsPerSandbox {
		e.conns.Add(-1)
		refuseFirst(fmt.Sprintf("more than %d connections at once", maxConnsPerSandbox))
		return
	}
	defer e.conns.Add(-1)
	if !e.track(c) {
		return
	}
	defer e.untrack(c)
	br := bufio.NewReaderSize(c, maxHeadBytes)
	for {
		req, hosts, err := nextRequest(c, br)
		if err != nil {
			return
		}
		c.SetReadDeadline(time.Time{})
		if req.Method == http.MethodConnect {
			p.tunnel(e, c, br, req)
			return
		}
		if !p.forward(e, c, req, hosts) {
			return
		}
	}
}

// target splits a request's destination into a lower-case host name or
// an address, and a port (def when none is given).
func target(hostport string, def uint16) (string, netip.Addr, uint16, error) {
	host, portS, err := net.SplitHostPort(hostport)
	if err != nil {
		host, portS = hostport, ""
		if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
			host = host[1 : len(host)-1]
		}
	}
	port := def
	if portS != "" {
		n, err := strconv.ParseUint(portS, 10, 16)
		if err != nil || n == 0 {
			return "", netip.Addr{}, 0, fmt.Errorf("bad port %q", portS)
		}
		port = uint16(n)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", netip.Addr{}, 0, errors.New("an address with a zone")
		}
		return "", a.Unmap(), port, nil
	}
	name, err := limits.HostName(strings.TrimSuffix(host, "."), false)
	if err != nil {
		return "", netip.Addr{}, 0, fmt.Errorf("%q: %w", host, err)
	}
	return name, netip.Addr{}, port, nil
}

// denial is a dial refused by the policy.
type denial struct{ v verdict }

func (d *denial) Error() string { return d.v.reason }

// dial connects e to host (a name) or addr on port where its policy
// allows, trying the addresses a name resolves to in turn. shown is how
// the destination is accounted.
func (p *Proxy) dial(ctx context.Context, e *sandboxEntry, host string, addr netip.Addr, port uint16) (net.Conn, verdict, error) {
	if host == "" {
		v := e.policy().addr(addr, port, nil, false)
		if !v.allow {
			return nil, v, &denial{v}
		}
		c, err := p.dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(addr, port).String())
		return c, v, err
	}
	byName := e.policy().name(host, port)
	if !byName.allow {
		return nil, byName, &denial{byName}
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	addrs, pinned, err := p.Resolver.resolve(ctx, host)
	if err != nil {
		return nil, byName, fmt.Errorf("resolve %s: %w", host, err)
	}
	last := byName
	var lastErr error = fmt.Errorf("%s has no address", host)
	for _, a := range addrs {
		v := e.policy().addr(a, port, &byName, pinned)
		if !v.allow {
			last, lastErr = v, &denial{v}
			continue
		}
		c, err := p.dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(a.Unmap(), port).String())
		if err == nil {
			return c, v, nil
		}
		last, lastErr = v, err
	}
	return nil, last, lastErr
}

// counted counts what crosses an upstream connection into its sandbox's
// accounting line.
type counted struct {
	net.Conn
	e    *sandboxEntry
	host string
	v    verdict
}

func (c *counted) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.e.account(c.host, c.v, 0, int64(n), false)
	return n, err
}

func (c *counted) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.e.account(c.host, c.v, int64(n), 0, false)
	return n, err
}

func (c *counted) CloseWrite() error {
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		return tc.CloseWrite()
	}
	return nil
}

// dialHTTP is the Transport's dial for plain HTTP requests.
func (p *Proxy) dialHTTP(ctx context.Context, e *sandboxEntry, hostport string) (net.Conn, error) {
	host, addr, port, err := target(hostport, 80)
	if err != nil {
		return nil, err
	}
	shown := hostport
	c, v, err := p.dial(ctx, e, host, addr, port)
	e.account(shown, v, 0, 0, true)
	if err != nil {
		return nil, err
	}
	return &counted{Conn: c, e: e, host: shown, v: v}, nil
}

// forward proxies one plain HTTP request; it reports whether the client's
// connection may carry another.
func (p *Proxy) forward(e *sandboxEntry, c net.Conn, req *http.Request, hosts []string) bool {
	if req.URL.Host == "" {
		refuse(c, "a plain HTTP request through the proxy names its host in the URL (http://host/path)")
		return false
	}
	if req.URL.Scheme != "http" {
		refuse(c, "only http:// URLs are proxied as requests; https goes through CONNECT")
		return false
	}
	// The Host header must name what the URL does: the server would
	// otherwise serve a host the policy never saw.
	if len(hosts) > 1 || len(hosts) == 1 && !strings.EqualFold(hosts[0], req.URL.Host) {
		v := denied("", "the Host header %q does not match the URL's host %q", strings.Join(hosts, ", "), req.URL.Host)
		e.account(req.URL.Host, v, 0, 0, true)
		refuse(c, v.reason)
		return false
	}
	out := req.Clone(context.Background())
	out.RequestURI = ""
	out.Header.Del("Proxy-Connection")
	out.Header.Del("Proxy-Authorization")
	resp, err := e.tr.RoundTrip(out)
	if err != nil {
		if d := (*denial)(nil); errors.As(err, &d) {
			refuse(c, d.v.reason)
		} else {
			badGateway(c, err.Error())
		}
		return false
	}
	defer resp.Body.Close()
	keep := !req.Close && !resp.Close
	if !keep {
		resp.Close = true
	}
	if err := resp.Write(c); err != nil {
		return false
	}
	return keep
}

// tunnel serves a CONNECT: to a host name, only TLS whose SNI is that
// name (no domain fronting under an allowed name); to an address, any
// bytes where the policy allows the address.
func (p *Proxy) tunnel(e *sandboxEntry, c net.Conn, br *bufio.Reader, req *http.Request) {
	host, addr, port, err := target(req.Host, 443)
	if err != nil {
		refuse(c, "CONNECT "+req.Host+": "+err.Error())
		return
	}
	if secrets := e.secretsFor(host); host != "" && len(secrets) > 0 {
		p.interceptTunnel(e, c, br, req, host, port, secrets)
		return
	}
	up, v, err := p.dial(context.Background(), e, host, addr, port)
	if err != nil {
		e.account(req.Host, v, 0, 0, true)
		if d := (*denial)(nil); errors.As(err, &d) {
			refuse(c, "CONNECT "+req.Host+": "+d.v.reason)
		} else {
			badGateway(c, "CONNECT "+req.Host+": "+err.Error())
		}
		return
	}
	defer up.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	var hello []byte
	if host != "" {
		if hello = p.helloFor(e, c, br, req.Host, host, v); hello == nil {
			return
		}
	}
	e.account(req.Host, v, 0, 0, true)
	cu := &counted{Conn: up, e: e, host: req.Host, v: v}
	if _, err := cu.Write(hello); err != nil {
		return
	}
	splice(c, br, cu)
}

// helloFor reads the ClientHello of a tunnel to host and returns its
// bytes, or nil when its server name is not host (the tunnel is refused,
// and accounted so).
func (p *Proxy) helloFor(e *sandboxEntry, c net.Conn, br *bufio.Reader, connect, host string, v verdict) []byte {
	c.SetReadDeadline(time.Now().Add(headerTimeout))
	sni, raw, err := peekSNI(br)
	c.SetReadDeadline(time.Time{})
	if err == nil && sni == host {
		return raw
	}
	why := fmt.Sprintf("the TLS server name %q does not match the CONNECT target %q", sni, host)
	if err != nil {
		why = fmt.Sprintf("a tunnel to a host name carries TLS naming it: %v", err)
	}
	e.account(connect, denied(v.rule, "%s", why), 0, 0, true)
	c.Write(alertAccessDenied)
	p.Log.Info("egress tunnel refused", "sandbox", shortID(e.id), "target", connect, "reason", why)
	return nil
}

// interceptTunnel serves a CONNECT to a host the sandbox has secrets
// for: the policy decides on the name, and each request in the tunnel is
// dialled (and decided on its addresses, and accounted) as the proxy
// makes it.
func (p *Proxy) interceptTunnel(e *sandboxEntry, c net.Conn, br *bufio.Reader, req *http.Request, host string, port uint16, secrets []Secret) {
	v := e.policy().name(host, port)
	if !v.allow {
		e.account(req.Host, v, 0, 0, true)
		refuse(c, "CONNECT "+req.Host+": "+v.reason)
		return
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	hello := p.helloFor(e, c, br, req.Host, host, v)
	if hello == nil {
		return
	}
	p.intercept(e, c, br, hello, host, req.Host, secrets)
}

// alertAccessDenied is a TLS fatal alert, access_denied (49): the client
// shows it as the reason its handshake failed.
var alertAccessDenied = []byte{0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 49}

// peekSNI reads a TLS ClientHello and returns its server name and the
// bytes read, to be passed on.
func peekSNI(r io.Reader) (string, []byte, error) {
	var buf bytes.Buffer
	var hello *tls.ClientHelloInfo
	stop := errors.New("stop")
	conn := &readOnly{r: io.TeeReader(io.LimitReader(r, maxHelloBytes), &buf)}
	err := tls.Server(conn, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		hello = h
		return nil, stop
	}}).Handshake()
	if hello == nil {
		if err == nil {
			err = errors.New("no ClientHello")
		}
		return "", nil, fmt.Errorf("not a TLS ClientHello (%v)", err)
	}
	return strings.ToLower(strings.TrimSuffix(hello.ServerName, ".")), buf.Bytes(), nil
}

// readOnly is a net.Conn over a reader, for crypto/tls to parse a
// ClientHello from; what it would write is dropped.
type readOnly struct {
	net.Conn
	r io.Reader
}

func (c *readOnly) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *readOnly) Write(b []byte) (int, error)      { return len(b), nil }
func (c *readOnly) Close() error                     { return nil }
func (c *readOnly) SetDeadline(time.Time) error      { return nil }
func (c *readOnly) SetReadDeadline(time.Time) error  { return nil }
func (c *readOnly) SetWriteDeadline(time.Time) error { return nil }
func (c *readOnly) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *readOnly) RemoteAddr() net.Addr             { return &net.TCPAddr{} }

// splice copies both ways until both end; the end of one direction is
// passed on as a half-close.
func splice(client net.Conn, fromClient io.Reader, up *counted) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(up, fromClient)
		up.CloseWrite()
	}()
	io.Copy(client, up)
	if tc, ok := client.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	<-done
}

func shortID(id string) string { return id[:min(12, len(id))] }

// nextRequest reads the next request's head on c within headerTimeout:
// the request, and the Host headers as sent (peekHost), which
// http.ReadRequest folds into one.
func nextRequest(c net.Conn, br *bufio.Reader) (*http.Request, []string, error) {
	c.SetReadDeadline(time.Now().Add(headerTimeout))
	hosts, err := peekHost(br)
	if err != nil {
		return nil, nil, err
	}
	req, err := http.ReadRequest(br)
	return req, hosts, err
}
