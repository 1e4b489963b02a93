package egress

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// A sandbox that floods the proxy with refused requests naming hosts of
// 30 KB makes it hold a bounded accounting: garbage under one fixed key,
// reasons cut, and the whole within maxUseBytes.
func TestProxyAccountingBounded(t *testing.T) {
	b := setup(t)
	if err := b.proxy.Register("s", netip.MustParseAddr("127.0.0.1"), policyOf(t, false, "a.example.test"), nil); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", b.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	ask := func(format string, args ...any) {
		t.Helper()
		fmt.Fprintf(c, format, args...)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Fatalf("%s, want 403", resp.Status)
		}
		c.Close()
		if c, err = net.Dial("tcp", b.proxyURL.Host); err != nil {
			t.Fatal(err)
		}
		br = bufio.NewReader(c)
	}
	const n = 600
	for i := range n {
		// A URL host no destination is, and a Host header of 30 KB: the
		// refusal's reason quotes both.
		junk := fmt.Sprintf("%d-%s", i, strings.Repeat("x", 30<<10))
		ask("GET http://%s/ HTTP/1.1\r\nHost: other-%s\r\n\r\n", junk, junk)
	}
	for i := range n {
		// Valid names, each its own line, with a Host of 30 KB.
		ask("GET http://h%d.example.test/ HTTP/1.1\r\nHost: %s\r\n\r\n", i, strings.Repeat("y", 30<<10))
	}
	use, _ := b.proxy.Usage("s")
	raw, _ := json.Marshal(use)
	t.Logf("%d lines, %d bytes of JSON", len(use), len(raw))
	if len(raw) > 2*maxUseBytes {
		t.Errorf("the accounting is %d bytes of JSON, want it within %d", len(raw), 2*maxUseBytes)
	}
	var invalid, other, total int64
	for _, u := range use {
		total += u.Connections
		switch u.Host {
		case hostInvalid:
			invalid += u.Connections
		case hostOther:
			other += u.Connections
		}
		if len(u.Host) > maxShownHost || len(u.Reason) > maxShownWords+len("…") {
			t.Errorf("a line holds %d bytes of host and %d of reason: %.80q", len(u.Host), len(u.Reason), u.Host)
		}
	}
	if invalid != n || other == 0 || total != 2*n {
		t.Errorf("%d invalid, %d other, %d in all; want %d under %q, some under %q, %d in all", invalid, other, total, n, hostInvalid, hostOther, 2*n)
	}
}

func TestCutKeepsCharacters(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "abc…"},
		{"aé", 2, "a…"},
		{"", 0, ""},
	} {
		if got := cut(tc.s, tc.n); got != tc.want {
			t.Errorf("cut(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
