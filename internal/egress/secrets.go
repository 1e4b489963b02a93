package egress

import "log/slog"

// Secret is a credential of the operator's that the proxy adds, as a
// header, to a sandbox's HTTPS requests to the secret's hosts, when the
// sandbox's policy names it. The sandbox never holds the value: the
// proxy terminates TLS for those hosts only (with the fleet CA the
// sandbox trusts) and re-originates it to the real host.
type Secret struct {
	Name   string   `json:"name"`
	Hosts  []string `json:"hosts"`  // exact host names, lower case
	Header string   `json:"header"` // the header set, replacing the sandbox's own
	Value  Value    `json:"value"`
}

// Value is a secret's value. It prints as "[redacted]": a log line or an
// error that formats a Secret never shows it. Its JSON is the value
// itself, for the control API only.
type Value string

func (Value) String() string   { return "[redacted]" }
func (Value) GoString() string { return "[redacted]" }

// LogValue keeps slog from showing it.
func (Value) LogValue() slog.Value { return slog.StringValue("[redacted]") }
