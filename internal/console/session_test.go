package console

import (
	"testing"
	"time"
)

// A session opens its secret until its TTL, never after; closing ends it
// at once; at the bound, a login ends the session nearest its end, and
// expired ones are swept first.
func TestSessions(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	s := newSessions(time.Hour, 3)
	s.now = func() time.Time { return now }

	a, err := s.open("secret-a")
	if err != nil {
		t.Fatal(err)
	}
	if a == "secret-a" || len(a) < 40 {
		t.Fatalf("session ID %q", a)
	}
	if got := s.secret(a); got != "secret-a" {
		t.Fatalf("a live session: %q", got)
	}
	if got := s.secret("secret-a"); got != "" {
		t.Errorf("the secret taken as an ID: %q", got)
	}
	now = now.Add(time.Hour - time.Second)
	if got := s.secret(a); got != "secret-a" {
		t.Errorf("a second before its end: %q", got)
	}
	now = now.Add(time.Second)
	if got := s.secret(a); got != "" {
		t.Errorf("at its end: %q, want none", got)
	}
	if n := s.len(); n != 0 {
		t.Errorf("an expired session looked up is dropped: %d held", n)
	}

	b, _ := s.open("b")
	now = now.Add(time.Minute)
	c, _ := s.open("c")
	now = now.Add(time.Minute)
	d, _ := s.open("d")
	now = now.Add(time.Minute)
	e, _ := s.open("e") // the bound: b, the oldest, ends
	if s.secret(b) != "" || s.secret(c) != "c" || s.secret(d) != "d" || s.secret(e) != "e" || s.len() != 3 {
		t.Errorf("at the bound: b %q c %q d %q e %q, %d held", s.secret(b), s.secret(c), s.secret(d), s.secret(e), s.len())
	}
	s.close(d)
	if s.secret(d) != "" {
		t.Error("a closed session still opens")
	}
	now = now.Add(2 * time.Hour) // c and e expire, unswept
	f, _ := s.open("f")
	g, _ := s.open("g")
	h, _ := s.open("h") // the bound: the expired are swept, no live one ends
	if s.secret(f) != "f" || s.secret(g) != "g" || s.secret(h) != "h" || s.len() != 3 {
		t.Errorf("after the sweep: f %q g %q h %q, %d held", s.secret(f), s.secret(g), s.secret(h), s.len())
	}
}
