// Package natsurl keeps NATS credentials out of logs and error messages.
// A --nats value or NATS_URL is a comma-separated list of server URLs,
// each of which may carry a user and password, or a token in the user
// position (nats://TOKEN@host): Redact hides both, Error scrubs them from
// an error's text (url.Parse errors, which nats.Connect returns, quote the
// URL whole).
package natsurl

import (
	"net/url"
	"strings"
)

// Mask replaces a secret.
const Mask = "xxxxx"

// Redact returns the list of server URLs with every password, and every
// user that has no password (a token), replaced by Mask. A URL that does
// not parse keeps its scheme and host; its user information is masked whole.
func Redact(servers string) string {
	parts := strings.Split(servers, ",")
	for i, p := range parts {
		parts[i] = redactOne(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

func redactOne(s string) string {
	u, err := url.Parse(withScheme(s))
	if err != nil {
		return maskUserinfo(s)
	}
	if u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), Mask)
	} else {
		u.User = url.User(Mask)
	}
	out := u.String()
	// url.String escapes nothing in Mask; only the scheme was added.
	if !strings.Contains(s, "://") {
		out = strings.TrimPrefix(out, "nats://")
	}
	return out
}

// withScheme adds nats:// when the URL has none, as nats.go does.
func withScheme(s string) string {
	if strings.Contains(s, "://") {
		return s
	}
	return "nats://" + s
}

// maskUserinfo masks what lies between the scheme and the last '@'.
func maskUserinfo(s string) string {
	at := strings.LastIndex(s, "@")
	if at < 0 {
		return s
	}
	start := 0
	if i := strings.Index(s, "://"); i >= 0 && i < at {
		start = i + 3
	}
	return s[:start] + Mask + s[at:]
}

// secrets returns the passwords and tokens of the list, as they appear in
// it (escaped or not).
func secrets(servers string) []string {
	var out []string
	for p := range strings.SplitSeq(servers, ",") {
		p = strings.TrimSpace(p)
		u, err := url.Parse(withScheme(p))
		if err != nil {
			if at := strings.LastIndex(p, "@"); at >= 0 {
				info := p[:at]
				if i := strings.Index(info, "://"); i >= 0 {
					info = info[i+3:]
				}
				secret := info
				if _, pw, ok := strings.Cut(info, ":"); ok {
					secret = pw
				}
				out = append(out, secret)
				if raw, err := url.PathUnescape(secret); err == nil {
					out = append(out, raw)
				}
			}
			continue
		}
		if u.User == nil {
			continue
		}
		secret, ok := u.User.Password()
		if !ok {
			secret = u.User.Username()
		}
		if secret == "" {
			continue
		}
		out = append(out, secret, url.QueryEscape(secret), url.PathEscape(secret))
	}
	return out
}

// Error returns err with the secrets of servers scrubbed from its text;
// errors.Is and errors.As still see err. It returns nil for nil.
func Error(err error, servers string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	scrubbed := msg
	for _, s := range secrets(servers) {
		if s != "" {
			scrubbed = strings.ReplaceAll(scrubbed, s, Mask)
		}
	}
	if scrubbed == msg {
		return err
	}
	return &redacted{err: err, msg: scrubbed}
}

type redacted struct {
	err error
	msg string
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// WithoutUser returns the list of server URLs without their user
// information: a connection that brings credentials of its own (a
// tenant's) must not take another's from the URL, which nats.go prefers
// to its options.
func WithoutUser(servers string) string {
	parts := strings.Split(servers, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if at := strings.LastIndex(p, "@"); at >= 0 {
			start := 0
			if j := strings.Index(p, "://"); j >= 0 && j < at {
				start = j + 3
			}
			p = p[:start] + p[at+1:]
		}
		parts[i] = p
	}
	return strings.Join(parts, ",")
}
