package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/egress/egresstest"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// bundle is a proxy on loopback in front of a test "internet": one HTTP
// and one HTTPS server, each echoing the Host it was asked for, reached
// through names the hosts map pins to loopback.
type bundle struct {
	proxy     *Proxy
	proxyURL  *url.URL
	httpPort  string
	httpsPort string
	ca        *egresstest.CA
}

func setup(t *testing.T) *bundle {
	t.Helper()
	ca := egresstest.NewCA(t)
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "host=%s path=%s auth=%s", r.Host, r.URL.Path, r.Header.Get("X-Api-Key"))
	})
	plain := httptest.NewServer(echo)
	t.Cleanup(plain.Close)
	secure := httptest.NewUnstartedServer(echo)
	cert, _, _ := ca.Issue(t, "a.example.test", "b.example.test", "example.test", "other.test")
	secure.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	secure.StartTLS()
	t.Cleanup(secure.Close)
	lo := netip.MustParseAddr("127.0.0.1")
	hosts := map[string][]netip.Addr{}
	for _, h := range []string{"a.example.test", "b.example.test", "example.test", "other.test"} {
		hosts[h] = []netip.Addr{lo}
	}
	var l net.Listener
	p := &Proxy{
		Resolver: &Resolver{Hosts: hosts, Lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
			if host == "rebind.test" { // a name a hostile DNS points at a private address
				return []netip.Addr{netip.MustParseAddr("10.0.0.1")}, nil
			}
			return nil, errors.New("no such host")
		}},
		Protect: Protected,
		Log:     slog.New(slog.DiscardHandler),
		Roots:   ca.Pool,
	}
	fleet, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	p.CA = fleet
	l, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go p.Serve(l)
	_, hp, _ := net.SplitHostPort(plain.Listener.Addr().String())
	_, sp, _ := net.SplitHostPort(secure.Listener.Addr().String())
	return &bundle{proxy: p, proxyURL: &url.URL{Scheme: "http", Host: l.Addr().String()}, httpPort: hp, httpsPort: sp, ca: ca}
}

func (b *bundle) client(sni string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyURL(b.proxyURL),
		TLSClientConfig: &tls.Config{RootCAs: b.ca.Pool, ServerName: sni},
	}}
}

func policyOf(t testing.TB, open bool, allow ...string) *limits.Network {
	t.Helper()
	n := &limits.Network{Open: open}
	for _, s := range allow {
		r, err := limits.ParseRule(s)
		if err != nil {
			t.Fatal(err)
		}
		n.Allow = append(n.Allow, r)
	}
	return n
}

// Each attack is a request through the proxy from a sandbox registered
// with its policy: what the policy allows gets the server's answer, the
// rest a 403 with the reason or a refused handshake, never a hang.
func TestProxyEnforcesPolicy(t *testing.T) {
	b := setup(t)
	lo := netip.MustParseAddr("127.0.0.1")
	cases := []struct {
		name   string
		policy *limits.Network
		url    string
		sni    string // TLS server name, when it differs from the URL's
		want   string // in the body of a 200; "" means refused
		reason string // in the refusal
	}{
		{name: "allowed host over HTTP", policy: policyOf(t, false, "*.example.test"),
			url: "http://a.example.test:" + b.httpPort + "/x", want: "host=a.example.test:" + b.httpPort + " path=/x"},
		{name: "allowed host over HTTPS", policy: policyOf(t, false, "a.example.test"),
			url: "https://a.example.test:" + b.httpsPort + "/y", want: "host=a.example.test:" + b.httpsPort + " path=/y"},
		{name: "a host not allowed", policy: policyOf(t, false, "a.example.test"),
			url: "http://other.test:" + b.httpPort + "/", reason: "no allow rule names other.test"},
		{name: "a host not allowed over HTTPS", policy: policyOf(t, false, "a.example.test"),
			url: "https://other.test:" + b.httpsPort + "/", reason: "no allow rule"},
		{name: "a wildcard's parent", policy: policyOf(t, false, "*.example.test"),
			url: "http://example.test:" + b.httpPort + "/", reason: "no allow rule names example.test"},
		{name: "the same host by IP", policy: policyOf(t, false, "a.example.test"),
			url: "http://127.0.0.1:" + b.httpPort + "/", reason: "protected range 127.0.0.0/8"},
		{name: "a port the rule does not name", policy: policyOf(t, false, "a.example.test:1"),
			url: "http://a.example.test:" + b.httpPort + "/", reason: "no allow rule"},
		{name: "SNI that is not the CONNECT target", policy: policyOf(t, false, "a.example.test"),
			url: "https://a.example.test:" + b.httpsPort + "/", sni: "b.example.test", reason: "access denied"},
		{name: "a deny rule over an allow rule", policy: &limits.Network{Allow: policyOf(t, false, "*.example.test").Allow,
			Deny: policyOf(t, false, "b.example.test").Allow},
			url: "http://b.example.test:" + b.httpPort + "/", reason: "denied by the rule b.example.test"},
		{name: "the metadata address under open egress", policy: policyOf(t, true),
			url: "http://169.254.169.254/latest/meta-data/", reason: "protected range 169.254.0.0/16"},
		{name: "loopback under open egress", policy: policyOf(t, true),
			url: "http://127.0.0.1:" + b.httpPort + "/", reason: "protected range 127.0.0.0/8"},
		{name: "an IPv6 literal under open egress", policy: policyOf(t, true),
			url: "http://[::1]:" + b.httpPort + "/", reason: "protected range ::1/128"},
		{name: "a v4-mapped IPv6 literal", policy: policyOf(t, true),
			url: "http://[::ffff:127.0.0.1]:" + b.httpPort + "/", reason: "protected range 127.0.0.0/8"},
		{name: "a name resolving to a private address (rebinding)", policy: policyOf(t, true),
			url: "http://rebind.test/", reason: "resolves to 10.0.0.1, in the protected range 10.0.0.0/8"},
		{name: "an address rule no wider than loopback opens it", policy: policyOf(t, false, "127.0.0.1/32"),
			url: "http://127.0.0.1:" + b.httpPort + "/z", want: "path=/z"},
		{name: "an address rule wider than the range does not", policy: policyOf(t, false, "0.0.0.0/0"),
			url: "http://127.0.0.1:" + b.httpPort + "/", reason: "protected range"},
	}
	for i, c := range cases {
		id := fmt.Sprintf("sandbox-%d", i)
		if err := b.proxy.Register(id, lo, c.policy, nil); err != nil {
			t.Fatal(err)
		}
		sni := c.sni
		if sni == "" {
			u, _ := url.Parse(c.url)
			sni = u.Hostname()
		}
		resp, err := b.client(sni).Get(c.url)
		var body []byte
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		switch {
		case c.want != "" && (err != nil || resp.StatusCode != 200 || !strings.Contains(string(body), c.want)):
			t.Errorf("%s: %v %v %q, want 200 with %q", c.name, err, statusOf(resp), body, c.want)
		case c.want == "" && err == nil && resp.StatusCode == 200:
			t.Errorf("%s: got through: %q", c.name, body)
		case c.want == "" && !strings.Contains(fmt.Sprint(err)+string(body), c.reason):
			t.Errorf("%s: refused with %v %q, want the reason %q", c.name, err, body, c.reason)
		}
		use, _ := b.proxy.Release(id)
		if len(use) == 0 || use[0].Allowed != (c.want != "") {
			t.Errorf("%s: accounted %+v", c.name, use)
		}
	}
}

func statusOf(r *http.Response) any {
	if r == nil {
		return nil
	}
	return r.Status
}

// A request whose Host header names another host than its URL is refused:
// the server would serve what the policy never saw.
func TestProxyRefusesHostMismatch(t *testing.T) {
	b := setup(t)
	if err := b.proxy.Register("s", netip.MustParseAddr("127.0.0.1"), policyOf(t, false, "a.example.test"), nil); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", b.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://a.example.test:%s/ HTTP/1.1\r\nHost: other.test\r\n\r\n", b.httpPort)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || !strings.Contains(string(body), "does not match") {
		t.Fatalf("%s %q", resp.Status, body)
	}
}

// A connection from an address no sandbox is registered at gets nothing,
// and what a sandbox carried is accounted per destination.
func TestProxyUnknownSourceAndAccounting(t *testing.T) {
	b := setup(t)
	resp, err := b.client("").Get("http://a.example.test:" + b.httpPort + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(body), "no sandbox with a network has the address 127.0.0.1") {
		t.Fatalf("unregistered: %s %q", resp.Status, body)
	}
	if err := b.proxy.Register("s", netip.MustParseAddr("127.0.0.1"), policyOf(t, false, "a.example.test"), nil); err != nil {
		t.Fatal(err)
	}
	cl := b.client("a.example.test")
	for range 3 {
		resp, err := cl.Get("https://a.example.test:" + b.httpsPort + "/" + strings.Repeat("p", 1000))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if resp, err := cl.Get("http://other.test:" + b.httpPort + "/"); err == nil {
		resp.Body.Close()
	}
	use, ok := b.proxy.Release("s")
	if !ok || len(use) != 2 {
		t.Fatalf("use %+v", use)
	}
	a, o := use[0], use[1]
	if a.Host != "a.example.test:"+b.httpsPort || !a.Allowed || a.Rule != "a.example.test" || a.Connections != 1 ||
		a.BytesOut < 3000 || a.BytesIn < 100 {
		t.Errorf("allowed line %+v", a)
	}
	if o.Host != "other.test:"+b.httpPort || o.Allowed || o.Connections != 1 || o.BytesOut != 0 || o.Reason == "" {
		t.Errorf("denied line %+v", o)
	}
	if _, ok := b.proxy.Release("s"); ok {
		t.Error("released twice")
	}
}

// A tunnel to a host name must carry TLS: raw bytes are refused.
func TestProxyTunnelToNameNeedsTLS(t *testing.T) {
	b := setup(t)
	if err := b.proxy.Register("s", netip.MustParseAddr("127.0.0.1"), policyOf(t, false, "a.example.test"), nil); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", b.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT a.example.test:%s HTTP/1.1\r\nHost: a.example.test:%s\r\n\r\n", b.httpPort, b.httpPort)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", err, statusOf(resp))
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: a.example.test\r\n\r\n")
	rest, _ := io.ReadAll(br)
	if string(rest) != string(alertAccessDenied) {
		t.Fatalf("after raw bytes in a tunnel to a name: %q, want a TLS access_denied alert", rest)
	}
	use, _ := b.proxy.Release("s")
	if len(use) != 1 || use[0].Allowed || !strings.Contains(use[0].Reason, "TLS") {
		t.Errorf("use %+v", use)
	}
}

// A connection the proxy refuses (from an address no sandbox has, or one
// past a sandbox's connections at once) has its request read first, so
// that the refusal answers it: a head that never ends must not be read
// without bound. Each sends a header line of 64 MiB; the proxy cuts the
// connection long before it took it all.
func TestProxyBoundsARefusedRequestsHead(t *testing.T) {
	b := setup(t)
	huge := func(t *testing.T) error {
		c, err := net.Dial("tcp", b.proxyURL.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		line := []byte("GET http://a.example.test/ HTTP/1.1\r\nX-Pad: ")
		pad := []byte(strings.Repeat("a", 1<<20))
		if _, err := c.Write(line); err != nil {
			return err
		}
		for range 64 {
			if _, err := c.Write(pad); err != nil {
				return err
			}
		}
		return nil
	}
	t.Run("unknown source", func(t *testing.T) {
		if err := huge(t); err == nil {
			t.Fatal("the proxy read a 64 MiB request head from an address no sandbox has")
		}
	})
	t.Run("over the connections", func(t *testing.T) {
		if err := b.proxy.Register("s", netip.MustParseAddr("127.0.0.1"), policyOf(t, false, "a.example.test"), nil); err != nil {
			t.Fatal(err)
		}
		defer b.proxy.Release("s")
		for range maxConnsPerSandbox {
			c, err := net.Dial("tcp", b.proxyURL.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte("GET http://a.example.test/ HTTP/1.1\r\n")); err != nil {
				t.Fatal(err)
			}
		}
		e := b.proxy.lookup(netip.MustParseAddr("127.0.0.1"))
		testutil.Eventually(t, 30*time.Second, "the sandbox's connections held", func() bool { return e.conns.Load() >= maxConnsPerSandbox })
		if err := huge(t); err == nil {
			t.Fatal("the proxy read a 64 MiB request head from a connection past the sandbox's bound")
		}
	})
}

// A sandbox with a secret for a.example.test gets the header added to its
// HTTPS requests there, through a tunnel the proxy terminates with the
// fleet CA and re-originates verifying the real host; a host without a
// secret is spliced as before (its own certificate, no header), and a
// request in the intercepted tunnel naming another host is refused.
func TestProxyInjectsSecret(t *testing.T) {
	b := setup(t)
	secret := Secret{Name: "k", Hosts: []string{"a.example.test"}, Header: "X-Api-Key", Value: "s3cr3t-value"}
	n := policyOf(t, false, "*.example.test")
	n.Secrets = []string{"k"}
	if err := b.proxy.Register("s", netip.MustParseAddr("127.0.0.1"), n, []Secret{secret}); err != nil {
		t.Fatal(err)
	}
	fleet := x509.NewCertPool()
	fleet.AppendCertsFromPEM(b.proxy.CA.PEM)
	get := func(roots *x509.CertPool, url string, hdr ...string) (string, error) {
		cl := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(b.proxyURL), TLSClientConfig: &tls.Config{RootCAs: roots}}}
		req, _ := http.NewRequest("GET", url, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := cl.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.Status + " " + string(body), nil
	}
	got, err := get(fleet, "https://a.example.test:"+b.httpsPort+"/in", "X-Api-Key", "the sandbox's own")
	if err != nil || !strings.Contains(got, "200") || !strings.HasSuffix(got, "path=/in auth=s3cr3t-value") {
		t.Errorf("intercepted: %q, %v; want the secret's header, replacing the sandbox's", got, err)
	}
	if _, err := get(b.ca.Pool, "https://a.example.test:"+b.httpsPort+"/"); err == nil {
		t.Error("an intercepted host showed the real host's certificate")
	}
	got, err = get(b.ca.Pool, "https://b.example.test:"+b.httpsPort+"/spliced")
	if err != nil || !strings.HasSuffix(got, "path=/spliced auth=") {
		t.Errorf("spliced: %q, %v; want the real host's certificate and no header", got, err)
	}
	if _, err := get(fleet, "https://b.example.test:"+b.httpsPort+"/"); err == nil {
		t.Error("a host without secrets was intercepted")
	}
	// Inside the intercepted tunnel, a request for another host.
	c, err := net.Dial("tcp", b.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT a.example.test:%s HTTP/1.1\r\nHost: a.example.test:%s\r\n\r\n", b.httpsPort, b.httpsPort)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", err, statusOf(resp))
	}
	tc := tls.Client(&replayConn{Conn: c, r: br}, &tls.Config{RootCAs: fleet, ServerName: "a.example.test"})
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: b.example.test:%s\r\n\r\n", b.httpsPort)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || strings.Contains(string(body), "s3cr3t") {
		t.Errorf("another host in the tunnel: %s %q, want 403", resp.Status, body)
	}
	use, _ := b.proxy.Release("s")
	var a limits.NetworkUse
	for _, u := range use {
		if u.Host == "a.example.test:"+b.httpsPort && u.Allowed {
			a = u
		}
	}
	if a.Connections < 1 || a.BytesIn == 0 || a.BytesOut == 0 {
		t.Errorf("the intercepted host accounted %+v; all %+v", a, use)
	}
}

// A sandbox's policy changes while it runs (a session locking itself
// after its installs): the same request then gets a 403, the tunnel
// opened before is closed, and the accounting goes on.
func TestProxyUpdateLocks(t *testing.T) {
	b := setup(t)
	if err := b.proxy.Register("s", netip.MustParseAddr("127.0.0.1"), policyOf(t, false, "a.example.test"), nil); err != nil {
		t.Fatal(err)
	}
	cl := b.client("a.example.test")
	url := "https://a.example.test:" + b.httpsPort + "/"
	resp, err := cl.Get(url)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("before: %v %v", err, statusOf(resp))
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err := b.proxy.Update("s", nil, nil); err != nil {
		t.Fatal(err)
	}
	// The kept-alive tunnel is gone: the client dials again and is refused.
	if resp, err := cl.Get(url); err == nil || !strings.Contains(err.Error(), "no allow rule names a.example.test") {
		t.Fatalf("after the lock: %v %v, want a 403 with the reason", err, statusOf(resp))
	}
	if err := b.proxy.Update("nobody", nil, nil); !errors.Is(err, errNoSandbox) {
		t.Errorf("updating no sandbox: %v", err)
	}
	use, _ := b.proxy.Usage("s")
	if len(use) != 2 || use[0].Allowed || use[0].Connections != 1 || !use[1].Allowed || use[1].Connections != 1 {
		t.Errorf("use %+v, want the allowed tunnel and the denied one", use)
	}
}
