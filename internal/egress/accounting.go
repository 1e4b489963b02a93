package egress

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sandfleet/sandfleet/pkg/limits"
)

// Bounds of one sandbox's accounting: what a sandbox can make the proxy
// hold, however it names its destinations (a refused request's host is
// the sandbox's to choose, up to a request head's size).
const (
	maxUseKeys    = 512      // distinct lines; the rest go to "(other)"
	maxUseBytes   = 64 << 10 // the lines' text; past it, the rest go to "(other)"
	maxShownHost  = 300      // a host:port as asked: a name of 253, a port, brackets
	maxShownWords = 300      // a rule or a reason, cut past it
	lineCost      = 128      // what a line holds besides its text, counted in maxUseBytes
)

// The accounting's own hosts: destinations that are not one.
const (
	hostInvalid = "(invalid)" // a destination that is no host:port (a refused request's garbage)
	hostOther   = "(other)"   // past the bounds
)

type useKey struct {
	host    string
	allowed bool
	rule    string
}

// accounting is a sandbox's egress, line by destination and verdict,
// bounded in lines and in text.
type accounting struct {
	lines map[useKey]*limits.NetworkUse
	text  int // the bytes the lines hold, with lineCost each
}

// add counts a connection (conn) and bytes out and in to host's line;
// its sandbox's lock is held.
func (a *accounting) add(host string, v verdict, out, in int64, conn bool) {
	if a.lines == nil {
		a.lines = map[useKey]*limits.NetworkUse{}
	}
	u := a.lines[useKey{host, v.allow, v.rule}]
	if u == nil {
		u = a.line(host, v)
	}
	if conn {
		u.Connections++
	}
	u.BytesOut += out
	u.BytesIn += in
}

// line returns the line a destination not yet seen goes to: its own,
// with its host and reason cut to size, while the bounds allow.
func (a *accounting) line(host string, v verdict) *limits.NetworkUse {
	if !validShown(host) {
		host = hostInvalid
	}
	k := useKey{host, v.allow, cut(v.rule, maxShownWords)}
	if u := a.lines[k]; u != nil {
		return u
	}
	u := &limits.NetworkUse{Host: k.host, Allowed: v.allow, Rule: k.rule, Reason: cut(v.reason, maxShownWords)}
	cost := lineCost + len(u.Host) + len(u.Rule) + len(u.Reason)
	if len(a.lines) >= maxUseKeys || a.text+cost > maxUseBytes {
		k = useKey{hostOther, v.allow, ""}
		if u = a.lines[k]; u != nil {
			return u
		}
		u, cost = &limits.NetworkUse{Host: hostOther, Allowed: v.allow}, lineCost
	}
	a.lines[k] = u
	a.text += cost
	return u
}

// validShown reports whether host is a destination as a sandbox may ask
// for one (a host name or an address, with a port or not).
func validShown(host string) bool {
	if len(host) > maxShownHost {
		return false
	}
	_, _, _, err := target(host, 0)
	return err == nil
}

// cut returns s cut to at most n bytes, at a character's boundary, saying
// so.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// list returns the accounting, sorted by host and rule.
func (a *accounting) list() []limits.NetworkUse {
	out := make([]limits.NetworkUse, 0, len(a.lines))
	for _, u := range a.lines {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b limits.NetworkUse) int {
		if c := strings.Compare(a.Host, b.Host); c != 0 {
			return c
		}
		return strings.Compare(a.Rule, b.Rule)
	})
	return out
}

// account adds to the destination's line.
func (e *sandboxEntry) account(host string, v verdict, out, in int64, conn bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.use.add(host, v, out, in, conn)
}

func (e *sandboxEntry) usage() []limits.NetworkUse {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.use.list()
}
