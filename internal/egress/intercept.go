package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// CA is the fleet CA: the proxy signs, with it, the certificates of the
// hosts it intercepts (those a sandbox's secrets are for), and the
// sandboxes trust it through the CA bundle mounted into them. The worker
// makes it and hands it to the proxy at each of its starts (ca.go).
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
	PEM  []byte // the certificate, PEM

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// maxLeaves bounds the certificates a CA keeps made: one per intercepted
// host, which only the operator's secrets name.
const maxLeaves = 1024

// NewCA makes a fleet CA valid for ten years.
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "sandfleet egress CA", Organization: []string{"sandfleet"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, PEM: pemCert(der), leaves: map[string]*tls.Certificate{}}, nil
}

// leaf returns the certificate the proxy shows a sandbox for host.
func (ca *CA) leaf(host string) (*tls.Certificate, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c := ca.leaves[host]; c != nil && time.Until(c.Leaf.NotAfter) > time.Hour {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	leaf, _ := x509.ParseCertificate(der)
	c := &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key, Leaf: leaf}
	if len(ca.leaves) >= maxLeaves {
		clear(ca.leaves)
	}
	ca.leaves[host] = c
	return c, nil
}

// secretsFor returns the secrets of e for host.
func (e *sandboxEntry) secretsFor(host string) []Secret {
	var out []Secret
	for _, s := range e.state.Load().secrets {
		if slices.Contains(s.Hosts, host) {
			out = append(out, s)
		}
	}
	return out
}

// replayConn is the client's connection with the bytes already read of it
// (the ClientHello, what the buffer holds) read first.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// intercept serves a tunnel to host, whose TLS (hello, already read) the
// proxy terminates with a certificate of the fleet CA: each request in it
// goes on over a TLS connection of the proxy's own to the real host,
// whose certificate is verified, with the secrets' headers set. connect
// is the CONNECT target, host:port.
func (p *Proxy) intercept(e *sandboxEntry, c net.Conn, br *bufio.Reader, hello []byte, host, connect string, secrets []Secret) {
	cert, err := p.CA.leaf(host)
	if err != nil {
		p.Log.Error("egress: issuing a certificate failed", "host", host, "error", err)
		return
	}
	tc := tls.Server(&replayConn{Conn: c, r: io.MultiReader(bytes.NewReader(hello), br)}, &tls.Config{
		Certificates: []tls.Certificate{*cert},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(headerTimeout))
	if err := tc.Handshake(); err != nil {
		return
	}
	tbr := bufio.NewReaderSize(tc, 64<<10)
	for {
		req, hosts, err := nextRequest(tc, tbr)
		if err != nil {
			return
		}
		tc.SetDeadline(time.Time{})
		if !p.forwardTLS(e, tc, req, hosts, host, connect, secrets) {
			return
		}
	}
}

// forwardTLS proxies one request of an intercepted tunnel; it reports
// whether the connection may carry another.
func (p *Proxy) forwardTLS(e *sandboxEntry, c net.Conn, req *http.Request, hosts []string, host, connect string, secrets []Secret) bool {
	// The request names the tunnel's host, and only it: a Host header or
	// an absolute URL naming another would take the secret elsewhere.
	same := func(h string) bool {
		h = strings.ToLower(strings.TrimSuffix(h, "."))
		return h == host || h == strings.ToLower(connect)
	}
	if len(hosts) != 1 || !same(hosts[0]) || req.URL.Host != "" && !same(req.URL.Host) {
		v := denied("", "the request's host %q is not the tunnel's %q", strings.Join(append(hosts, req.URL.Host), ", "), connect)
		e.account(connect, v, 0, 0, true)
		refuse(c, v.reason)
		return false
	}
	if req.Header.Get("Upgrade") != "" {
		refuse(c, "no protocol upgrade through a tunnel whose host has secrets")
		return false
	}
	out := req.Clone(context.Background())
	out.RequestURI = ""
	out.URL = &url.URL{Scheme: "https", Host: connect, Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
	out.Host = hosts[0]
	for _, s := range secrets {
		out.Header.Set(s.Header, string(s.Value))
	}
	resp, err := e.tlsTr.RoundTrip(out)
	if err != nil {
		if d := (*denial)(nil); errors.As(err, &d) {
			refuse(c, d.v.reason)
		} else {
			// The error may quote the request (never its headers): say
			// what failed without it.
			badGateway(c, fmt.Sprintf("%s: %v", connect, scrub(err, secrets)))
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

// scrub returns err's text without any of the secrets' values.
func scrub(err error, secrets []Secret) string {
	s := err.Error()
	for _, sec := range secrets {
		s = strings.ReplaceAll(s, string(sec.Value), "[redacted]")
	}
	return s
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
