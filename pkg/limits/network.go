package limits

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Network is a job's egress: where its sandbox may connect to, through the
// worker's egress proxy (the sandbox itself has no route out). A nil
// *Network is no network at all, the default.
//
// Its JSON is false or "none" (no network, as nil), true (Open), or a
// policy object {"allow": [...], "deny": [...]} of rules (see ParseRule).
// A deny rule wins over an allow rule.
type Network struct {
	// Open is the internet: any host or address but the protected ranges
	// (see the egress package), where the worker allows open egress.
	Open  bool
	Allow []Rule
	Deny  []Rule
	// Secrets names the operator's secrets (the worker's --secrets) the
	// proxy adds to the job's HTTPS requests to their hosts; the job never
	// sees their values.
	Secrets []string
	// SecretHosts, in a worker's caps only, are the secrets a job may
	// name, each with the hosts it is for. It is never read from JSON.
	SecretHosts map[string][]string
}

// MaxSecrets bounds the secrets one policy names.
const MaxSecrets = 32

// MaxRules bounds each of a policy's lists: the proxy matches every
// connection against them.
const MaxRules = 256

// Rule names a destination: a host name (a leading "*." matches every name
// under it, not the name itself), or an IP address or CIDR prefix, with an
// optional port (0: any port).
type Rule struct {
	Host   string       // lower case, without a trailing dot; "" for an address rule
	Prefix netip.Prefix // an address is a /32 or /128; zero for a host rule
	Port   uint16
}

// Wildcard reports whether r is a "*.name" rule.
func (r Rule) Wildcard() bool { return strings.HasPrefix(r.Host, "*.") }

// String renders r as ParseRule reads it.
func (r Rule) String() string {
	var s string
	switch {
	case r.Host != "":
		s = r.Host
	case r.Prefix.IsSingleIP():
		s = r.Prefix.Addr().String()
	default:
		s = r.Prefix.String()
	}
	if r.Port == 0 {
		return s
	}
	if r.Host == "" && r.Prefix.Addr().Is6() {
		s = "[" + s + "]"
	}
	return s + ":" + strconv.Itoa(int(r.Port))
}

// ParseRule reads one rule: "pypi.org", "*.pythonhosted.org",
// "203.0.113.7", "198.51.100.0/24", "2001:db8::/32", each optionally with
// ":PORT" (an IPv6 address or prefix with a port in brackets:
// "[2001:db8::1]:443"). Host names are case-insensitive letters, digits
// and hyphens, dot-separated, at most 253 bytes.
func ParseRule(s string) (Rule, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return Rule{}, errors.New("empty rule")
	}
	host, port, err := splitRulePort(in)
	if err != nil {
		return Rule{}, err
	}
	r := Rule{Port: port}
	if p, err := netip.ParsePrefix(host); err == nil {
		if p.Addr().Zone() != "" {
			return Rule{}, fmt.Errorf("%q: an address must not carry a zone", s)
		}
		r.Prefix = p.Masked()
		if r.Prefix != p {
			return Rule{}, fmt.Errorf("%q: a prefix must have no bits set past its length (did you mean %s?)", s, r.Prefix)
		}
		r.Prefix = netip.PrefixFrom(r.Prefix.Addr().Unmap(), r.Prefix.Bits()-unmapBits(p.Addr()))
		return r, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return Rule{}, fmt.Errorf("%q: an address must not carry a zone", s)
		}
		a = a.Unmap()
		r.Prefix = netip.PrefixFrom(a, a.BitLen())
		return r, nil
	}
	name, err := HostName(strings.TrimSuffix(host, "."), true)
	if err != nil {
		return Rule{}, fmt.Errorf("%q: %w", s, err)
	}
	r.Host = name
	return r, nil
}

// unmapBits is what unmapping a v4-in-v6 address takes off its prefix.
func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}

func splitRulePort(s string) (string, uint16, error) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", 0, fmt.Errorf("%q: a '[' without its ']'", s)
		}
		host, rest := s[1:end], s[end+1:]
		if rest == "" {
			return host, 0, nil
		}
		if !strings.HasPrefix(rest, ":") {
			return "", 0, fmt.Errorf("%q: want [ADDRESS]:PORT", s)
		}
		p, err := parsePort(rest[1:])
		return host, p, err
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 || strings.Count(s, ":") > 1 { // no port, or a bare IPv6 address
		return s, 0, nil
	}
	p, err := parsePort(s[i+1:])
	if err != nil {
		return "", 0, fmt.Errorf("%q: %w", s, err)
	}
	return s[:i], p, nil
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("port %q: want 1 to 65535", s)
	}
	return uint16(n), nil
}

// HostName checks and lower-cases a DNS name: letters, digits and hyphens
// in dot-separated labels of 1 to 63 bytes, not starting or ending with a
// hyphen, 253 bytes at most. With wildcard, a leading "*." is allowed.
func HostName(s string, wildcard bool) (string, error) {
	name := strings.ToLower(s)
	body := name
	if wildcard && strings.HasPrefix(body, "*.") {
		body = body[2:]
	}
	if body == "" || len(name) > 253 {
		return "", errors.New("a host name must be 1 to 253 bytes")
	}
	// A name of digits is an address in disguise ("1.2.3.4." or a
	// resolver's "0x7f.1"): a top-level label is never all digits.
	if last := body[strings.LastIndexByte(body, '.')+1:]; strings.Trim(last, "0123456789") == "" {
		return "", errors.New("a host name's last label must not be all digits (an address is written as one)")
	}
	for label := range strings.SplitSeq(body, ".") {
		if label == "" || len(label) > 63 {
			return "", errors.New("a host name's labels must be 1 to 63 bytes")
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "", errors.New("a host name's label must not start or end with '-'")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				if c == '*' {
					return "", errors.New("'*' only as a leading \"*.\"")
				}
				return "", fmt.Errorf("a host name has only letters, digits, '-' and '.' (not %q)", c)
			}
		}
	}
	return name, nil
}

// ParseRules reads a comma- or space-separated list of rules, as the
// worker's --egress-allow takes it.
func ParseRules(s string) ([]Rule, error) {
	var out []Rule
	for f := range strings.FieldsFuncSeq(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		r, err := ParseRule(f)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Covers reports whether r allows everything other does: the same host,
// a wildcard over it ("*.a" covers "b.a" and "*.b.a", not "a"), or a
// prefix holding other's; and any port, or other's own.
func (r Rule) Covers(other Rule) bool {
	if r.Port != 0 && r.Port != other.Port {
		return false
	}
	switch {
	case r.Host != "" && other.Host != "":
		if r.Host == other.Host {
			return true
		}
		return r.Wildcard() && strings.HasSuffix(strings.TrimPrefix(other.Host, "*"), r.Host[1:])
	case r.Host == "" && other.Host == "":
		return r.Prefix.Bits() <= other.Prefix.Bits() && r.Prefix.Contains(other.Prefix.Addr())
	}
	return false
}

// MatchesName reports whether host rule r names host (a lower-case name)
// on port.
func (r Rule) MatchesName(host string, port uint16) bool {
	if r.Host == "" || !r.portOK(port) {
		return false
	}
	if r.Wildcard() {
		return strings.HasSuffix(host, r.Host[1:]) && len(host) > len(r.Host)-1
	}
	return host == r.Host
}

// MatchesAddr reports whether address rule r holds a on port.
func (r Rule) MatchesAddr(a netip.Addr, port uint16) bool {
	return r.Host == "" && r.Prefix.IsValid() && r.portOK(port) && r.Prefix.Contains(a.Unmap())
}

// portOK: a rule with no port allows any port.
func (r Rule) portOK(port uint16) bool { return r.Port == 0 || r.Port == port }

// MarshalText writes the rule as ParseRule reads it.
func (r Rule) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads a rule with ParseRule.
func (r *Rule) UnmarshalText(b []byte) error {
	v, err := ParseRule(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// networkJSON is the policy object's form.
type networkJSON struct {
	Allow   []Rule   `json:"allow,omitempty"`
	Deny    []Rule   `json:"deny,omitempty"`
	Secrets []string `json:"secrets,omitempty"`
}

// MarshalJSON writes true for Open, else the policy object.
func (n Network) MarshalJSON() ([]byte, error) {
	if n.Open && len(n.Allow) == 0 && len(n.Deny) == 0 && len(n.Secrets) == 0 {
		return []byte("true"), nil
	}
	type open struct {
		Open bool `json:"open,omitempty"`
		networkJSON
	}
	return json.Marshal(open{n.Open, networkJSON{n.Allow, n.Deny, n.Secrets}})
}

// UnmarshalJSON reads true, false, "none", "open" or the policy object. A
// false or "none" leaves the zero Network, which Limits.Fill turns into nil.
func (n *Network) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch string(b) {
	case "true", `"open"`:
		*n = Network{Open: true}
		return nil
	case "false", `"none"`, "null":
		*n = Network{}
		return nil
	}
	if len(b) == 0 || b[0] != '{' {
		return fmt.Errorf("invalid network %s: want false, \"none\", true or {\"allow\": [...], \"deny\": [...]}", shortJSON(b))
	}
	var v struct {
		Open bool `json:"open"`
		networkJSON
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("invalid network policy: %w", err)
	}
	*n = Network{Open: v.Open, Allow: v.Allow, Deny: v.Deny, Secrets: v.Secrets}
	return n.check()
}

func shortJSON(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// None reports whether n grants no network: nil, or neither open nor
// allowing anything (deny rules alone allow nothing).
func (n *Network) None() bool { return n == nil || !n.Open && len(n.Allow) == 0 }

// check bounds the lists; each rule was checked as it was read.
func (n *Network) check() error {
	if len(n.Allow) > MaxRules || len(n.Deny) > MaxRules {
		return fmt.Errorf("invalid network policy: at most %d allow and %d deny rules", MaxRules, MaxRules)
	}
	if len(n.Secrets) > MaxSecrets {
		return fmt.Errorf("invalid network policy: at most %d secrets", MaxSecrets)
	}
	return nil
}

// Equal reports whether n and o are the same policy (nil and a policy
// that grants nothing are the same).
func (n *Network) Equal(o *Network) bool {
	if n.None() || o.None() {
		return n.None() && o.None()
	}
	return n.Open == o.Open && slices.Equal(n.Allow, o.Allow) && slices.Equal(n.Deny, o.Deny) && slices.Equal(n.Secrets, o.Secrets)
}

// String renders n as its JSON, "none" for no network.
func (n *Network) String() string {
	if n.None() {
		return "none"
	}
	b, _ := json.Marshal(n)
	return string(b)
}

// within checks n against the worker's caps: open only where caps are
// open, each allow rule covered by one of caps' (deny rules only narrow).
func (n *Network) within(caps *Network) error {
	if n.None() {
		return nil
	}
	if caps.None() {
		return &FieldError{Field: "network", Value: n.String(), Err: ErrNotAllow,
			Cap: "this worker gives no job a network"}
	}
	if n.Open && !caps.Open {
		return &FieldError{Field: "network", Value: "true", Err: ErrNotAllow,
			Cap: "this worker allows no open egress, only named hosts"}
	}
	if err := n.check(); err != nil {
		return &FieldError{Field: "network", Value: err.Error(), Err: ErrInvalid}
	}
	for i, r := range n.Allow {
		if !slices.ContainsFunc(caps.Allow, func(c Rule) bool { return c.Covers(r) }) {
			return &FieldError{Field: fmt.Sprintf("network.allow[%d]", i), Value: strconv.Quote(r.String()), Err: ErrNotAllow,
				Cap: "not within the worker's --egress-allow"}
		}
	}
	for i, name := range n.Secrets {
		hosts, ok := caps.SecretHosts[name]
		if !ok {
			return &FieldError{Field: fmt.Sprintf("network.secrets[%d]", i), Value: strconv.Quote(name), Err: ErrNotAllow,
				Cap: "no such secret in the worker's --secrets"}
		}
		for _, h := range hosts {
			if !n.allowsName(h) {
				return &FieldError{Field: fmt.Sprintf("network.secrets[%d]", i), Value: strconv.Quote(name), Err: ErrNotAllow,
					Cap: fmt.Sprintf("it is for %s, which the job's network does not allow", h)}
			}
		}
	}
	return nil
}

// allowsName reports whether n's rules let a job reach host on some port
// (a secret is for a host, on whichever port the job names).
func (n *Network) allowsName(host string) bool {
	for _, r := range n.Deny {
		if r.Host != "" && r.Port == 0 && r.MatchesName(host, 0) {
			return false
		}
	}
	if n.Open {
		return true
	}
	return slices.ContainsFunc(n.Allow, func(r Rule) bool { return r.MatchesName(host, r.Port) })
}

// NetworkUse is what a job's sandbox sent to and received from one
// destination through the egress proxy, or tried to: a result lists one
// per destination (as the job named it, host:port) and verdict.
type NetworkUse struct {
	Host        string `json:"host"`
	Allowed     bool   `json:"allowed"`
	Rule        string `json:"rule,omitempty"`   // the rule that allowed or denied it; "open" for open egress
	Reason      string `json:"reason,omitempty"` // why it was denied (the first time)
	Connections int64  `json:"connections"`      // connections (or plain HTTP requests' upstream connections) made or refused
	BytesOut    int64  `json:"bytes_out"`        // to the destination
	BytesIn     int64  `json:"bytes_in"`         // from it
}
