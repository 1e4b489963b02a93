package egress

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/pkg/limits"
)

// The sandboxes' networks and the proxy's own addresses are refused
// before any rule: a wide one, an exact one, open egress, or a name the
// operator pinned there.
func TestForbiddenBeforeEveryRule(t *testing.T) {
	t.Parallel()
	forbid := ForbiddenFor(netip.MustParsePrefix("10.231.0.0/16"), []netip.Addr{netip.MustParseAddr("172.18.0.2")})
	for _, tc := range []struct {
		rules  string
		open   bool
		addr   string
		pinned bool
		allow  bool
	}{
		{"10.0.0.0/8", false, "10.231.0.3", false, false},
		{"10.231.0.3", false, "10.231.0.3", false, false},
		{"10.231.0.2:3128", false, "10.231.0.2", false, false},
		{"", true, "10.231.4.3", false, false},
		{"mirror.test", false, "10.231.0.3", true, false},
		{"172.18.0.2:3129", false, "172.18.0.2", false, false},
		{"127.0.0.1", false, "127.0.0.1", false, false},
		{"0.0.0.0/8", false, "0.0.0.0", false, false},
		{"::1", false, "::1", false, false},
		{"::ffff:10.231.0.3", false, "::ffff:10.231.0.3", false, false},
		// The control: the rest of 10/8 is still the operator's to open.
		{"10.0.0.0/8", false, "10.230.0.3", false, true},
		{"mirror.test", false, "10.1.2.3", true, true},
	} {
		p := policy{net: &limits.Network{Open: tc.open, Allow: mustRules(t, tc.rules)}, protect: Protected, forbid: forbid}
		var byName *verdict
		if tc.pinned {
			v := p.name("mirror.test", 80)
			byName = &v
		}
		v := p.addr(netip.MustParseAddr(tc.addr), 80, byName, tc.pinned)
		if v.allow != tc.allow {
			t.Errorf("rules %q open %v: %s allowed %v (%s), want %v", tc.rules, tc.open, tc.addr, v.allow, v.reason, tc.allow)
		}
		if !tc.allow && !strings.Contains(v.reason, "never reachable") {
			t.Errorf("rules %q: %s refused with %q, want it to say the address is never reachable", tc.rules, tc.addr, v.reason)
		}
	}
}

func mustRules(t *testing.T, s string) []limits.Rule {
	t.Helper()
	r, err := limits.ParseRules(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
