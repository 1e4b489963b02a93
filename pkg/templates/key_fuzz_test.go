package templates

import (
	"testing"

	"github.com/sandfleet/sandfleet/internal/fleet"
)

// A key names one template of one owner: whatever a caller spells, Key of
// a valid tenant and name parses back to them, and no name of one owner
// spells a key of another's (Key round-trips, so no two owners or names
// share a key).
func FuzzKey(f *testing.F) {
	for _, seed := range [][2]string{{"", "t1"}, {"team-a", "t1"}, {"team-a", "a.b"}, {"", "_tenant.team-a.t1"},
		{"team-a", "_tenant.team-b.t1"}, {"team-a", "a..b"}, {"", "a."}, {"team-a", ">"}, {"team.a", "t"}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, tenant, name string) {
		if !ValidName(name) || tenant != "" && !fleet.ValidTenant(tenant) {
			return
		}
		key := Key(tenant, name)
		gotTenant, gotName, ok := parseKey(key)
		if !ok || gotTenant != tenant || gotName != name {
			t.Fatalf("Key(%q, %q) = %q parses as %q, %q, %v", tenant, name, key, gotTenant, gotName, ok)
		}
	})
}
