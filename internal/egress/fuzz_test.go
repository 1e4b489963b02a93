package egress

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
)

// What a sandbox sends the proxy is hostile: a CONNECT target, a request
// head, a ClientHello. None may panic, and a target that parses names
// either a valid host or an address, never both.
func FuzzTarget(f *testing.F) {
	for _, s := range []string{"a.example.test:443", "[::1]:80", "[::ffff:127.0.0.1]:8080", "1.2.3.4", "a..b:1", ":0", "[fe80::1%eth0]:1", "x:99999", "A.B.:443"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		host, addr, port, err := target(s, 443)
		if err != nil {
			return
		}
		if (host == "") == !addr.IsValid() || port == 0 {
			t.Fatalf("target(%q) = %q, %v, %d", s, host, addr, port)
		}
		if host != "" && (host != strings.ToLower(host) || strings.HasSuffix(host, ".")) {
			t.Fatalf("target(%q): host %q not canonical", s, host)
		}
		if addr.IsValid() && addr.Is4In6() {
			t.Fatalf("target(%q): a v4-mapped address %v escapes the v4 ranges", s, addr)
		}
	})
}

func FuzzRequestHead(f *testing.F) {
	for _, s := range []string{
		"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
		"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nhost: b.test\r\n\r\n",
		"CONNECT a.test:443 HTTP/1.1\r\n\r\n",
		"\x16\x03\x01\x00\x05hello",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(b), 64<<10)
		if hosts, err := peekHost(br); err == nil && len(hosts) > 0 && br.Buffered() == 0 {
			t.Fatalf("peekHost consumed the head")
		}
		peekSNI(bytes.NewReader(b))
		pol := policy{net: policyOf(t, true), protect: Protected}
		if h, a, p, err := target(string(b), 80); err == nil {
			if h != "" {
				pol.name(h, p)
			} else {
				pol.addr(a, p, nil, false)
			}
		}
	})
}
