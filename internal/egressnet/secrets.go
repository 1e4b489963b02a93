package egressnet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/sandfleet/sandfleet/internal/egress"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// The operator's secrets, as the worker reads them (--secrets) and picks
// those a sandbox's policy names for the proxy.

// MaxSecretBytes bounds a secret's value.
const MaxSecretBytes = 16 << 10

// secretFile is one entry of the worker's --secrets file.
type secretFile struct {
	Name      string   `json:"name"`
	Hosts     []string `json:"hosts"`
	Header    string   `json:"header"`
	ValueFile string   `json:"value_file"`
	ValueEnv  string   `json:"value_env"`
}

// LoadSecrets reads the worker's --secrets file: a JSON list of
// {"name", "hosts", "header", "value_file" | "value_env"}. A value comes
// from its file (trailing newlines trimmed) or from the worker's
// environment (getenv); errors name the entry, never the value.
func LoadSecrets(path string, getenv func(string) string) ([]egress.Secret, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var entries []secretFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("%s: want a JSON list of {\"name\", \"hosts\", \"header\", \"value_file\" or \"value_env\"}: %w", path, err)
	}
	seen := map[string]bool{}
	out := make([]egress.Secret, 0, len(entries))
	for i, e := range entries {
		where := fmt.Sprintf("%s: secret %d (%q)", path, i, e.Name)
		if e.Name == "" || seen[e.Name] {
			return nil, fmt.Errorf("%s: a secret needs a name of its own", where)
		}
		seen[e.Name] = true
		if len(e.Hosts) == 0 {
			return nil, fmt.Errorf("%s: no hosts", where)
		}
		s := egress.Secret{Name: e.Name, Header: http.CanonicalHeaderKey(e.Header)}
		for _, h := range e.Hosts {
			name, err := limits.HostName(strings.TrimSuffix(h, "."), false)
			if err != nil {
				return nil, fmt.Errorf("%s: host %q: %w", where, h, err)
			}
			s.Hosts = append(s.Hosts, name)
		}
		if !validHeader(s.Header) {
			return nil, fmt.Errorf("%s: header %q is not a header name", where, e.Header)
		}
		var v string
		switch {
		case e.ValueFile != "" && e.ValueEnv != "":
			return nil, fmt.Errorf("%s: value_file or value_env, not both", where)
		case e.ValueFile != "":
			vb, err := os.ReadFile(e.ValueFile)
			if err != nil {
				return nil, fmt.Errorf("%s: value_file: %w", where, err)
			}
			v = strings.TrimRight(string(vb), "\r\n")
		case e.ValueEnv != "":
			v = getenv(e.ValueEnv)
			if v == "" {
				return nil, fmt.Errorf("%s: value_env: $%s is not set", where, e.ValueEnv)
			}
		default:
			return nil, fmt.Errorf("%s: value_file or value_env is required", where)
		}
		if v == "" || len(v) > MaxSecretBytes || strings.ContainsAny(v, "\r\n\x00") {
			return nil, fmt.Errorf("%s: the value must be 1 to %d bytes, on one line", where, MaxSecretBytes)
		}
		s.Value = egress.Value(v)
		out = append(out, s)
	}
	return out, nil
}

// validHeader: an HTTP token, and not one the proxy itself manages.
func validHeader(h string) bool {
	if h == "" {
		return false
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c)) {
			return false
		}
	}
	switch h {
	case "Host", "Connection", "Content-Length", "Transfer-Encoding", "Upgrade", "Te", "Trailer", "Proxy-Authorization", "Proxy-Connection":
		return false
	}
	return true
}

// SecretHosts is what a worker's caps know of its secrets: each name
// with its hosts, for limits to check a job's network against.
func SecretHosts(ss []egress.Secret) map[string][]string {
	if len(ss) == 0 {
		return nil
	}
	out := make(map[string][]string, len(ss))
	for _, s := range ss {
		out[s.Name] = s.Hosts
	}
	return out
}

// pick returns the secrets of ss that n names, or an error naming one
// it does not have.
func pick(ss []egress.Secret, n *limits.Network) ([]egress.Secret, error) {
	var out []egress.Secret
	for _, name := range n.Secrets {
		i := -1
		for j := range ss {
			if ss[j].Name == name {
				i = j
			}
		}
		if i < 0 {
			return nil, fmt.Errorf("egress: no secret %q", name)
		}
		out = append(out, ss[i])
	}
	return out, nil
}
