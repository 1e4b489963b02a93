package gateway

import "testing"

// The three bounds of a kind of slot, in turn: a token's, its tenant's
// (all its tokens together) and the gateway's; a slot given back is
// taken again, and an empty count leaves nothing behind.
func TestSlotsBounds(t *testing.T) {
	t.Parallel()
	s := newSlots("streams", "event streams open", 5, 2, 3)
	steps := []struct {
		token, tenant string
		want          string
	}{
		{"a1", "A", ""},
		{"a1", "A", ""},
		{"a1", "A", boundToken}, // a1 at its 2
		{"a2", "A", ""},         // A at its 3
		{"a2", "A", boundTenant},
		{"b1", "", ""},
		{"b2", "", ""}, // the gateway at its 5
		{"c1", "", boundGateway},
		{"", "", boundGateway}, // an open gateway's caller: the gateway's bound only
	}
	for i, st := range steps {
		if got := s.acquire(st.token, st.tenant); got != st.want {
			t.Fatalf("step %d (%s of %q): refused by %q, want %q", i, st.token, st.tenant, got, st.want)
		}
	}
	s.release("a1", "A")
	if got := s.acquire("a2", "A"); got != "" {
		t.Errorf("a2 after a1 gave one back: refused by %q", got)
	}
	for _, k := range [][2]string{{"a1", "A"}, {"a2", "A"}, {"a2", "A"}, {"b1", ""}, {"b2", ""}} {
		s.release(k[0], k[1])
	}
	if s.busy != 0 || len(s.tokens) != 0 || len(s.tenants) != 0 {
		t.Errorf("after every release: busy %d, tokens %v, tenants %v", s.busy, s.tokens, s.tenants)
	}
}
