package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// CONNECT tunnels: to a name, only TLS whose ClientHello names it (or, for
// a host the sandbox has secrets for, TLS the proxy terminates,
// intercept.go); to an address, any bytes the policy allows.

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
