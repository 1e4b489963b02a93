package egress

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/sandfleet/sandfleet/pkg/limits"
)

// Protected are the ranges no job reaches unless a rule names them, no
// wider than the range itself (so 10.0.0.0/8 opens 10/8, 0.0.0.0/0 opens
// none of it): "this network", private, shared (CGNAT), loopback,
// link-local (with the cloud metadata address 169.254.169.254), the
// IETF's and benchmarking ranges, multicast and the reserved rest; for
// IPv6 the unspecified and loopback addresses, unique-local (fc00::/7,
// with fd00::/8), link-local, multicast, NAT64 and the documentation
// prefix. The Docker bridges (172.16.0.0/12 by default) and the host's
// own addresses are added by the gateway (Config.Protect).
var Protected = mustPrefixes(
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15",
	"224.0.0.0/4", "240.0.0.0/4",
	"::/128", "::1/128", "64:ff9b::/96", "100::/64", "2001:db8::/32",
	"fc00::/7", "fe80::/10", "ff00::/8",
)

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// verdict is the proxy's decision on one destination.
type verdict struct {
	allow  bool
	rule   string // the rule that allowed or denied it, or "open"
	reason string // why not, for a denial
}

func denied(rule, format string, args ...any) verdict {
	return verdict{rule: rule, reason: fmt.Sprintf(format, args...)}
}

// policy is a job's network as the proxy applies it, with the ranges it
// protects.
type policy struct {
	net     *limits.Network
	protect []netip.Prefix
	forbid  []netip.Prefix // never reached, whatever the rules (Proxy.Forbid)
}

// forbiddenBy returns the forbidden range holding a, if any.
func (p policy) forbiddenBy(a netip.Addr) (netip.Prefix, bool) {
	for _, r := range p.forbid {
		if r.Contains(a) {
			return r, true
		}
	}
	return netip.Prefix{}, false
}

// protectedBy returns the protected range holding a, if any.
func (p policy) protectedBy(a netip.Addr) (netip.Prefix, bool) {
	for _, r := range p.protect {
		if r.Contains(a) {
			return r, true
		}
	}
	return netip.Prefix{}, false
}

// name decides a host name on port before it is resolved.
func (p policy) name(host string, port uint16) verdict {
	for _, r := range p.net.Deny {
		if r.MatchesName(host, port) {
			return denied(r.String(), "denied by the rule %s", r)
		}
	}
	for _, r := range p.net.Allow {
		if r.MatchesName(host, port) {
			return verdict{allow: true, rule: r.String()}
		}
	}
	if p.net.Open {
		return verdict{allow: true, rule: "open"}
	}
	return denied("", "no allow rule names %s", hostPort(host, port))
}

// addr decides an address on port: one asked for by the job (pinned
// false, allowedBy the verdict on the name it resolves, or nil for an
// address literal), or one the operator's hosts map pinned a name to.
func (p policy) addr(a netip.Addr, port uint16, byName *verdict, pinned bool) verdict {
	a = a.Unmap()
	// The sandboxes' own networks and the proxy itself come before any
	// rule, even an exact one: an operator's mirror range that holds them
	// must not open one tenant's sandbox to another's.
	if f, ok := p.forbiddenBy(a); ok {
		return denied("", "%s is in %s, the sandboxes' or the proxy's own addresses, never reachable", a, f)
	}
	for _, r := range p.net.Deny {
		if r.MatchesAddr(a, port) {
			return denied(r.String(), "denied by the rule %s", r)
		}
	}
	prot, isProt := p.protectedBy(a)
	// An address rule opens a protected address only when it is no wider
	// than the protected range itself.
	for _, r := range p.net.Allow {
		if r.MatchesAddr(a, port) && (!isProt || r.Prefix.Bits() >= prot.Bits()) {
			return verdict{allow: true, rule: r.String()}
		}
	}
	if byName != nil && (pinned || !isProt) {
		return *byName
	}
	if isProt {
		if byName != nil {
			return denied(byName.rule, "resolves to %s, in the protected range %s", a, prot)
		}
		return denied("", "%s is in the protected range %s", a, prot)
	}
	if p.net.Open {
		return verdict{allow: true, rule: "open"}
	}
	return denied("", "no allow rule names %s", netip.AddrPortFrom(a, port))
}

func hostPort(host string, port uint16) string {
	return fmt.Sprintf("%s:%d", host, port)
}

// Resolver finds a host name's addresses. Hosts pins names to addresses
// (tests, air-gapped fleets, an operator's mirror): a pinned name is never
// looked up, and its addresses may be protected ones, since the operator
// named them.
type Resolver struct {
	Hosts  map[string][]netip.Addr
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error) // nil: the system's resolver
}

// resolve returns host's addresses and whether the hosts map pinned them.
func (r *Resolver) resolve(ctx context.Context, host string) ([]netip.Addr, bool, error) {
	if a, ok := r.Hosts[host]; ok {
		return slices.Clone(a), true, nil
	}
	if r.Lookup == nil {
		return nil, false, fmt.Errorf("cannot resolve %s: no resolver", host)
	}
	a, err := r.Lookup(ctx, host)
	return a, false, err
}

// ParseHosts reads a hosts map as the worker's --egress-hosts and the
// proxy's --hosts take it: NAME=IP entries, comma-separated; a name may
// repeat for several addresses.
func ParseHosts(s string) (map[string][]netip.Addr, error) {
	out := map[string][]netip.Addr{}
	for kv := range strings.SplitSeq(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		name, ip, ok := strings.Cut(kv, "=")
		a, err := netip.ParseAddr(strings.TrimSpace(ip))
		if !ok || err != nil {
			return nil, fmt.Errorf("%q: want NAME=IP", kv)
		}
		host, err := limits.HostName(strings.TrimSuffix(strings.TrimSpace(name), "."), false)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", kv, err)
		}
		out[host] = append(out[host], a.Unmap())
	}
	return out, nil
}

// ForbiddenFor returns what a proxy serving the sandboxes of sandboxNet
// never connects to, whatever the rules: that network (every sandbox,
// and the proxy's address on each sandbox's network), the proxy's own
// loopback and "this host" addresses (0.0.0.0 reaches the host's own
// services), and the addresses of its interfaces now (its outside
// network's, where its control API listens).
func ForbiddenFor(sandboxNet netip.Prefix, own []netip.Addr) []netip.Prefix {
	out := []netip.Prefix{sandboxNet.Masked()}
	out = append(out, mustPrefixes("127.0.0.0/8", "0.0.0.0/8", "::1/128", "::/128")...)
	for _, a := range own {
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out
}
