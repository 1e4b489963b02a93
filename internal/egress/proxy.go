package egress

import (
	"bufio"
	"bytes"
	"context"
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
