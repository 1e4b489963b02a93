package executor

import (
	"errors"
	"testing"
)

func TestParseUIDRange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want UIDRange
		ok   bool
	}{
		{"100000-165535", DefaultUIDs, true},
		{"5-5", UIDRange{5, 5}, true},
		{"0-10", UIDRange{}, false},         // root
		{"10-9", UIDRange{}, false},         // backwards
		{"1-2147483648", UIDRange{}, false}, // 2^31
		{"100000", UIDRange{}, false},
		{"a-b", UIDRange{}, false},
		{"-5-10", UIDRange{}, false},
		{"", UIDRange{}, false},
	} {
		got, err := ParseUIDRange(tc.in)
		if (err == nil) != tc.ok || tc.ok && got != tc.want {
			t.Errorf("ParseUIDRange(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestUIDClaims: an executor's sandboxes never hold one uid twice; a uid
// the engine said is taken is not tried again by the same launch; a freed
// uid can be claimed again.
func TestUIDClaims(t *testing.T) {
	t.Parallel()
	c := newUIDClaims(UIDRange{First: 7, Last: 10})
	seen := map[uint32]bool{}
	for range 4 {
		uid, err := c.claim(nil)
		if err != nil || uid < 7 || uid > 10 || seen[uid] {
			t.Fatalf("claim = %d, %v; held %v", uid, err, seen)
		}
		seen[uid] = true
	}
	if uid, err := c.claim(nil); !errors.Is(err, errNoUID) || !errors.Is(err, ErrInfrastructure) {
		t.Fatalf("a fifth claim of four = %d, %v; want errNoUID", uid, err)
	}
	c.free(8)
	c.free(9)
	if uid, err := c.claim(map[uint32]bool{8: true}); err != nil || uid != 9 {
		t.Fatalf("claim with 8 taken elsewhere = %d, %v; want 9", uid, err)
	}
	if uid, err := c.claim(map[uint32]bool{8: true}); !errors.Is(err, errNoUID) {
		t.Fatalf("claim with the last free one taken elsewhere = %d, %v; want errNoUID", uid, err)
	}
}
