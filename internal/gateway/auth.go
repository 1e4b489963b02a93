package gateway

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// TokenLabel is the label a job gets with the name of the token that
// submitted it. The gateway sets it on every job it queues, replacing any
// value the caller gave, so a result always says which token asked for it.
const TokenLabel = jobs.TokenLabel

// TokenPrefix starts every token NewToken makes, so that a leaked one is
// easy to recognise (and to scan for) as a sandfleet token.
const TokenPrefix = "sft_"

// Token is one entry of a token file: a name and the SHA-256 of the secret.
// The secret itself is never stored: a token is 32 random bytes, so a
// plain hash cannot be reversed by guessing, and no slow hash is needed.
type Token struct {
	Name string
	Hash [sha256.Size]byte
	// Queues the token may submit to; empty means every queue.
	Queues []string
	// Role is RoleRead for a token that may only read: the console and
	// the API's GET routes, never submit or cancel. "" is the default,
	// which may do everything.
	Role string
	// Tenant, if set, makes the token its tenant's: its jobs, workspaces,
	// artifacts, events, batches and console pages are the tenant's, read
	// and written over the tenant's own NATS connection (Config.Tenants),
	// and it reaches nothing of another tenant's or of no tenant's.
	Tenant string
}

// RoleRead is the role of a read-only token (role=read in the file).
const RoleRead = "read"

// CanWrite reports whether the token may submit and cancel jobs. A nil
// token is an open gateway's caller, who may.
func (t *Token) CanWrite() bool { return t == nil || t.Role != RoleRead }

// Allows reports whether the token may submit to queue.
func (t *Token) Allows(queue string) bool {
	return len(t.Queues) == 0 || slices.Contains(t.Queues, queue)
}

// Tokens is a set of tokens, looked up by the hash of the secret.
type Tokens struct {
	byHash map[[sha256.Size]byte]*Token
}

// Tenants returns the tenants of the tokens, each once.
func (ts *Tokens) Tenants() []string {
	var list []string
	if ts != nil {
		for _, t := range ts.byHash {
			if t.Tenant != "" && !slices.Contains(list, t.Tenant) {
				list = append(list, t.Tenant)
			}
		}
	}
	slices.Sort(list)
	return list
}

// Operators reports whether any token is of no tenant (the operator's).
func (ts *Tokens) Operators() bool {
	if ts == nil {
		return false
	}
	for _, t := range ts.byHash {
		if t.Tenant == "" {
			return true
		}
	}
	return false
}

// list returns the tokens.
func (ts *Tokens) list() []*Token {
	if ts == nil {
		return nil
	}
	return slices.Collect(maps.Values(ts.byHash))
}

// Len returns the number of tokens.
func (ts *Tokens) Len() int {
	if ts == nil {
		return 0
	}
	return len(ts.byHash)
}

// Lookup returns the token whose secret is secret, or nil. Looking up the
// hash rather than comparing secrets leaks nothing through timing: what
// the map compares is a hash the caller cannot steer.
func (ts *Tokens) Lookup(secret string) *Token {
	if ts == nil || secret == "" {
		return nil
	}
	return ts.byHash[sha256.Sum256([]byte(secret))]
}

var validTokenName = regexp.MustCompile(`^[A-Za-z0-9_.@-]{1,64}$`)

// ParseTokens reads a token file: one token a line,
//
//	NAME sha256:HEX [queues=Q1,Q2] [role=read] [tenant=T]
//
// where HEX is the SHA-256 of the token's secret (what `gateway token`
// prints), queues, if given, are the only queues it may submit to,
// role=read makes it read-only (the console without its cancel button,
// the API's GET routes), and tenant=T makes it tenant T's (Token.Tenant).
// Blank lines and lines starting with # are skipped; ";" also ends an
// entry, so that a whole file fits in one environment variable.
func ParseTokens(r io.Reader) (*Tokens, error) {
	ts := &Tokens{byHash: map[[sha256.Size]byte]*Token{}}
	names := map[string]bool{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		for entry := range strings.SplitSeq(sc.Text(), ";") {
			entry = strings.TrimSpace(entry)
			if entry == "" || strings.HasPrefix(entry, "#") {
				continue
			}
			t, err := parseToken(entry)
			if err != nil {
				return nil, fmt.Errorf("tokens line %d: %w", n, err)
			}
			if names[t.Name] {
				return nil, fmt.Errorf("tokens line %d: name %q used twice", n, t.Name)
			}
			if _, dup := ts.byHash[t.Hash]; dup {
				return nil, fmt.Errorf("tokens line %d: the hash of %q is another token's too", n, t.Name)
			}
			names[t.Name] = true
			ts.byHash[t.Hash] = t
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	return ts, nil
}

func parseToken(entry string) (*Token, error) {
	f := strings.Fields(entry)
	if len(f) < 2 || len(f) > 5 {
		return nil, errors.New("want NAME sha256:HEX [queues=Q1,Q2] [role=read] [tenant=T]")
	}
	t := &Token{Name: f[0]}
	if !validTokenName.MatchString(t.Name) {
		return nil, fmt.Errorf("name %q must match %s", t.Name, validTokenName)
	}
	hx, ok := strings.CutPrefix(f[1], "sha256:")
	if !ok {
		// A secret pasted where its hash belongs must not become valid.
		return nil, fmt.Errorf("token %q: the second field must be sha256:HEX, the hash of the secret (gateway token NAME prints it)", t.Name)
	}
	b, err := hex.DecodeString(hx)
	if err != nil || len(b) != sha256.Size {
		return nil, fmt.Errorf("token %q: sha256: want 64 hex digits", t.Name)
	}
	t.Hash = [sha256.Size]byte(b)
	seen := map[string]bool{}
	for _, kv := range f[2:] {
		key, val, _ := strings.Cut(kv, "=")
		if seen[key] {
			return nil, fmt.Errorf("token %q: %s given twice", t.Name, key)
		}
		seen[key] = true
		switch key {
		case "queues":
			for q := range strings.SplitSeq(val, ",") {
				if !jobs.ValidQueue(q) {
					return nil, fmt.Errorf("token %q: queue %q must match [A-Za-z0-9_-]{1,64}", t.Name, q)
				}
				t.Queues = append(t.Queues, q)
			}
		case "role":
			if val != RoleRead {
				return nil, fmt.Errorf("token %q: role %q: the only role is read (leave it out for a token that may do everything)", t.Name, val)
			}
			t.Role = val
		case "tenant":
			if !jobs.ValidTenant(val) {
				return nil, fmt.Errorf("token %q: tenant %q must match [a-z0-9][a-z0-9-]{0,31}", t.Name, val)
			}
			t.Tenant = val
		default:
			return nil, fmt.Errorf("token %q: unknown field %q (want queues=Q1,Q2, role=read or tenant=T)", t.Name, kv)
		}
	}
	return t, nil
}

// NewToken returns a fresh secret and the token file line that admits it
// under name (queues optional).
func NewToken(name string, queues []string) (secret, line string, err error) {
	return NewTokenWith(name, TokenOptions{Queues: queues})
}

// NewTokenRole is NewToken for a token of a role ("" or RoleRead).
func NewTokenRole(name string, queues []string, role string) (secret, line string, err error) {
	return NewTokenWith(name, TokenOptions{Queues: queues, Role: role})
}

// TokenOptions are what a token line may say besides its name and hash.
type TokenOptions struct {
	Queues []string // queues=: the only queues it may submit to; none: every queue
	Role   string   // role=: "" or RoleRead
	Tenant string   // tenant=: the tenant it is; "": the operator's
}

// NewTokenWith returns a fresh secret and the token file line that admits
// it under name, with o.
func NewTokenWith(name string, o TokenOptions) (secret, line string, err error) {
	if o.Role != "" && o.Role != RoleRead {
		return "", "", fmt.Errorf("role %q: the only role is read", o.Role)
	}
	if o.Tenant != "" && !jobs.ValidTenant(o.Tenant) {
		return "", "", fmt.Errorf("tenant %q must match [a-z0-9][a-z0-9-]{0,31}", o.Tenant)
	}
	if !validTokenName.MatchString(name) {
		return "", "", fmt.Errorf("name %q must match %s", name, validTokenName)
	}
	for _, q := range o.Queues {
		if !jobs.ValidQueue(q) {
			return "", "", fmt.Errorf("queue %q must match [A-Za-z0-9_-]{1,64}", q)
		}
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	secret = TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	h := sha256.Sum256([]byte(secret))
	line = name + " sha256:" + hex.EncodeToString(h[:])
	if len(o.Queues) > 0 {
		line += " queues=" + strings.Join(o.Queues, ",")
	}
	if o.Role != "" {
		line += " role=" + o.Role
	}
	if o.Tenant != "" {
		line += " tenant=" + o.Tenant
	}
	return secret, line, nil
}

// EnvTokens names the environment variable read when no token file is
// given; it holds what the file would ("NAME sha256:HEX; NAME2 ...").
const EnvTokens = "SANDFLEET_TOKENS"

// LoadTokens reads the token file at path, or $SANDFLEET_TOKENS when path
// is "". Neither given: nil, no error (an open gateway; see CheckOpen).
func LoadTokens(path string) (*Tokens, error) {
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		ts, err := ParseTokens(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return ts, nil
	}
	if env := os.Getenv(EnvTokens); env != "" {
		ts, err := ParseTokens(strings.NewReader(env))
		if err != nil {
			return nil, fmt.Errorf("$%s: %w", EnvTokens, err)
		}
		return ts, nil
	}
	return nil, nil
}

// ErrOpenNotLoopback: a gateway without tokens may listen on loopback only.
var ErrOpenNotLoopback = errors.New("a gateway without tokens listens on loopback only (127.0.0.1, ::1, localhost): give tokens (--tokens FILE or $" + EnvTokens + ")")

// CheckOpen returns ErrOpenNotLoopback for an address other than loopback
// when there are no tokens.
func CheckOpen(addr string, ts *Tokens) error {
	if ts.Len() > 0 {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("%s: %w", addr, ErrOpenNotLoopback)
}
