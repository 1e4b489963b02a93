package jobs

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/internal/fleet"
)

// The patterns ValidID, ValidQueue and ValidTenant are written out from:
// the specification, as documented in docs/jobs.md and docs/design.md.
var (
	idPattern     = regexp.MustCompile(`^(?:[a-z0-9][a-z0-9-]{0,31}\.)?[A-Za-z0-9_-]{1,128}$`)
	queuePattern  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	tenantPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)
)

// namesAgree fails t when a checker and its pattern disagree on s.
func namesAgree(t *testing.T, s string) {
	t.Helper()
	for _, c := range []struct {
		name string
		got  bool
		re   *regexp.Regexp
	}{
		{"ValidID", ValidID(s), idPattern},
		{"ValidQueue", ValidQueue(s), queuePattern},
		{"ValidTenant", ValidTenant(s), tenantPattern},
	} {
		if want := c.re.MatchString(s); c.got != want {
			t.Errorf("%s(%q) = %v, the pattern says %v", c.name, s, c.got, want)
		}
	}
}

func TestNamesMatchTheirPatterns(t *testing.T) {
	t.Parallel()
	// Every length around each bound, of each kind of byte, and random
	// strings over the bytes that matter, dots and a multi-byte rune
	// included.
	kinds := []string{"a", "Z", "0", "_", "-", ".", " ", "é", "\x00", "/", "*", ">"}
	for _, k := range kinds {
		for _, n := range []int{0, 1, 2, 31, 32, 33, 63, 64, 65, 127, 128, 129, 161, 162} {
			namesAgree(t, strings.Repeat(k, n))
			namesAgree(t, "t."+strings.Repeat(k, n))
			namesAgree(t, strings.Repeat(k, n)+".x")
		}
	}
	rng := rand.New(rand.NewPCG(7, 11))
	var b strings.Builder
	n := 200_000
	if testing.Short() {
		n = 10_000 // the fast lane (make check); FuzzNames goes deeper
	}
	for range n {
		b.Reset()
		for range rng.IntN(170) {
			b.WriteString(kinds[rng.IntN(len(kinds))])
		}
		namesAgree(t, b.String())
	}
}

func FuzzNames(f *testing.F) {
	for _, s := range []string{"", "abc", "team-a.abc", "-a.b", "a.b.c", strings.Repeat("x", 128)} {
		f.Add(s)
	}
	f.Fuzz(namesAgree)
}

// The fleet's default cap on a job's size is the client's.
func TestMaxJobBytesIsTheFleets(t *testing.T) {
	if MaxJobBytes != fleet.MaxJobBytes {
		t.Errorf("jobs.MaxJobBytes %d, fleet.MaxJobBytes %d", MaxJobBytes, fleet.MaxJobBytes)
	}
}
