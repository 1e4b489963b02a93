package limits

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in, want string // want "" means an error
	}{
		{"pypi.org", "pypi.org"},
		{"PyPI.org.", "pypi.org"},
		{"*.pythonhosted.org", "*.pythonhosted.org"},
		{"pypi.org:443", "pypi.org:443"},
		{"203.0.113.7", "203.0.113.7"},
		{"203.0.113.7:22", "203.0.113.7:22"},
		{"198.51.100.0/24:443", "198.51.100.0/24:443"},
		{"2001:db8::1", "2001:db8::1"},
		{"[2001:db8::1]:443", "[2001:db8::1]:443"},
		{"[2001:db8::/32]:443", "[2001:db8::/32]:443"},
		{"::ffff:203.0.113.7", "203.0.113.7"},
		{"::ffff:203.0.113.0/120", "203.0.113.0/24"},
		{"", ""},
		{"*", ""},
		{"*.", ""},
		{"a.*.b", ""},
		{"**.a", ""},
		{"-a.b", ""},
		{"a_b.c", ""},
		{"a..b", ""},
		{"a.b:0", ""},
		{"a.b:65536", ""},
		{"a.b:http", ""},
		{"198.51.100.1/24", ""}, // bits past the prefix
		{"fe80::1%eth0", ""},
		{"[2001:db8::1", ""},
		{"[2001:db8::1]443", ""},
		{strings.Repeat("a", 64) + ".b", ""},
		{strings.Repeat("a.", 127) + "bc", ""},
	}
	for _, c := range cases {
		r, err := ParseRule(c.in)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("ParseRule(%q) = %v, want an error", c.in, r)
		case c.want != "" && err != nil:
			t.Errorf("ParseRule(%q): %v", c.in, err)
		case c.want != "" && r.String() != c.want:
			t.Errorf("ParseRule(%q) = %q, want %q", c.in, r, c.want)
		}
	}
}

func rule(t *testing.T, s string) Rule {
	t.Helper()
	r, err := ParseRule(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRuleCoversAndMatches(t *testing.T) {
	t.Parallel()
	covers := []struct {
		cap, job string
		want     bool
	}{
		{"pypi.org", "pypi.org", true},
		{"pypi.org", "pypi.org:443", true},
		{"pypi.org:443", "pypi.org", false}, // any port is more than 443
		{"pypi.org:443", "pypi.org:80", false},
		{"*.example.test", "a.example.test", true},
		{"*.example.test", "*.a.example.test", true},
		{"*.example.test", "example.test", false}, // a wildcard's parent
		{"*.example.test", "aexample.test", false},
		{"a.example.test", "*.example.test", false},
		{"10.0.0.0/8", "10.1.2.3", true},
		{"10.0.0.0/8", "10.1.0.0/16:22", true},
		{"10.1.0.0/16", "10.0.0.0/8", false},
		{"10.0.0.0/8", "example.test", false},
		{"example.test", "10.0.0.1", false},
	}
	for _, c := range covers {
		if got := rule(t, c.cap).Covers(rule(t, c.job)); got != c.want {
			t.Errorf("%q covers %q = %v, want %v", c.cap, c.job, got, c.want)
		}
	}
	names := []struct {
		rule, host string
		port       uint16
		want       bool
	}{
		{"*.example.test", "a.example.test", 443, true},
		{"*.example.test", "b.a.example.test", 80, true},
		{"*.example.test", "example.test", 443, false},
		{"example.test:443", "example.test", 80, false},
		{"example.test", "example.test", 8443, true},
		{"10.0.0.0/8", "10.0.0.1", 80, false}, // an address rule names no host
	}
	for _, c := range names {
		if got := rule(t, c.rule).MatchesName(c.host, c.port); got != c.want {
			t.Errorf("%q matches %s:%d = %v, want %v", c.rule, c.host, c.port, got, c.want)
		}
	}
	if !rule(t, "198.51.100.0/24:443").MatchesAddr(netip.MustParseAddr("::ffff:198.51.100.9"), 443) {
		t.Error("a v4-mapped address is not matched by its IPv4 prefix")
	}
	if rule(t, "198.51.100.0/24:443").MatchesAddr(netip.MustParseAddr("198.51.100.9"), 22) {
		t.Error("a rule with a port matched another port")
	}
}

func TestNetworkJSON(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in, want string // want: the Limits' JSON back; "" means an error
	}{
		{`{}`, `{}`},
		{`{"network": false}`, `{}`},
		{`{"network": "none"}`, `{}`},
		{`{"network": null}`, `{}`},
		{`{"network": true}`, `{"network":true}`},
		{`{"network": {"allow": ["PyPI.org", "*.pythonhosted.org", "198.51.100.0/24:443"], "deny": ["evil.pypi.org"]}}`,
			`{"network":{"allow":["pypi.org","*.pythonhosted.org","198.51.100.0/24:443"],"deny":["evil.pypi.org"]}}`},
		{`{"network": {"allow": []}}`, `{}`},
		{`{"network": {"deny": ["a.test"]}}`, `{}`}, // deny alone grants nothing
		{`{"network": {"allow": ["a..b"]}}`, ""},
		{`{"network": {"alow": ["a.b"]}}`, ""},
		{`{"network": 1}`, ""},
		{`{"network": "open-ish"}`, ""},
		{`{"network": {"allow": "a.b"}}`, ""},
	}
	for _, c := range cases {
		var l Limits
		err := json.Unmarshal([]byte(c.in), &l)
		if c.want == "" {
			if err == nil {
				t.Errorf("%s: accepted", c.in)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		l = l.Fill(Limits{})
		b, _ := json.Marshal(l)
		if string(b) != c.want {
			t.Errorf("%s: back as %s, want %s", c.in, b, c.want)
		}
	}
	many := `{"network": {"allow": [` + strings.TrimSuffix(strings.Repeat(`"a.b",`, MaxRules+1), ",") + `]}}`
	if err := json.Unmarshal([]byte(many), &Limits{}); err == nil {
		t.Errorf("%d allow rules accepted", MaxRules+1)
	}
}

func TestNetworkWithinCaps(t *testing.T) {
	t.Parallel()
	allow, err := ParseRules("pypi.org, *.pythonhosted.org 198.51.100.0/24:443")
	if err != nil {
		t.Fatal(err)
	}
	named := DefaultCaps()
	named.Network = &Network{Allow: allow}
	open := DefaultCaps()
	open.Network = &Network{Open: true, Allow: allow}
	secret := DefaultCaps()
	secret.Network = &Network{Allow: allow, SecretHosts: map[string][]string{"pypi": {"pypi.org"}, "files": {"files.pythonhosted.org"}}}
	withSecrets := func(n *Network, names ...string) *Network { n.Secrets = names; return n }
	policy := func(rules ...string) *Network {
		n := &Network{}
		for _, s := range rules {
			n.Allow = append(n.Allow, rule(t, s))
		}
		return n
	}
	cases := []struct {
		name  string
		caps  Caps
		net   *Network
		field string   // "" means accepted
		msg   []string // in the error
	}{
		{name: "none needs no caps", caps: DefaultCaps(), net: nil},
		{name: "a policy where no job may have a network", caps: DefaultCaps(), net: policy("pypi.org"),
			field: "network", msg: []string{"no job a network"}},
		{name: "within", caps: named, net: policy("pypi.org:443", "files.pythonhosted.org", "198.51.100.7:443")},
		{name: "a host beyond", caps: named, net: policy("pypi.org", "github.com"),
			field: "network.allow[1]", msg: []string{`"github.com"`, "--egress-allow"}},
		{name: "a wildcard's parent", caps: named, net: policy("pythonhosted.org"), field: "network.allow[0]"},
		{name: "the same host by IP", caps: named, net: policy("151.101.0.223"), field: "network.allow[0]"},
		{name: "any port where the cap names one", caps: named, net: policy("198.51.100.7"), field: "network.allow[0]"},
		{name: "the metadata address", caps: named, net: policy("169.254.169.254"), field: "network.allow[0]"},
		{name: "open where only named hosts are", caps: named, net: &Network{Open: true},
			field: "network", msg: []string{"no open egress"}},
		{name: "open where open", caps: open, net: &Network{Open: true}},
		{name: "a secret for an allowed host", caps: secret, net: withSecrets(policy("pypi.org:443", "*.pythonhosted.org"), "pypi", "files")},
		{name: "an unknown secret", caps: secret, net: withSecrets(policy("pypi.org"), "pypi", "gh"),
			field: "network.secrets[1]", msg: []string{`"gh"`, "no such secret"}},
		{name: "a secret for a host not allowed", caps: secret, net: withSecrets(policy("pypi.org"), "files"),
			field: "network.secrets[0]", msg: []string{`"files"`, "files.pythonhosted.org", "does not allow"}},
		{name: "a secret for a host denied", caps: secret, net: withSecrets(&Network{Allow: allow, Deny: []Rule{rule(t, "pypi.org")}}, "pypi"),
			field: "network.secrets[0]", msg: []string{"pypi.org"}},
		{name: "deny rules are always fine", caps: named, net: &Network{Allow: allow, Deny: []Rule{rule(t, "github.com")}}},
	}
	for _, c := range cases {
		_, err := Resolve(Limits{Network: c.net}, Default(), c.caps)
		if c.field == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, ErrNotAllow) {
			t.Errorf("%s: err = %v, want ErrNotAllow on %s", c.name, err, c.field)
			continue
		}
		for _, m := range append(c.msg, "limits."+c.field) {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: %q lacks %q", c.name, err, m)
			}
		}
	}
}

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"pypi.org", "*.a.b:443", "10.0.0.0/8", "[::1]:22", "::ffff:1.2.3.4/128", "a.b:", "[", "*.*", "1.2.3.4:99999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			return
		}
		// The canonical form parses back to the same rule, which covers
		// itself and is matched by what it names.
		back, err := ParseRule(r.String())
		if err != nil || back != r {
			t.Fatalf("ParseRule(%q) = %v; its String %q parses to %v, %v", s, r, r.String(), back, err)
		}
		if !r.Covers(r) {
			t.Fatalf("%v does not cover itself", r)
		}
		port := r.Port
		if port == 0 {
			port = 443
		}
		if r.Host != "" && !r.Wildcard() && !r.MatchesName(r.Host, port) {
			t.Fatalf("%v does not match its own host", r)
		}
		if r.Host == "" && !r.MatchesAddr(r.Prefix.Addr(), port) {
			t.Fatalf("%v does not match its own address", r)
		}
	})
}
