// Package natscreds reads the files that hold a NATS user's credentials:
// the one worker --embedded writes for its server (read by submit), and
// a tenant's that a gateway serves the tenant's tokens with.
package natscreds

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
)

// File is the file, in the data directory of worker --embedded, that
// holds the user and password its NATS server takes (and nothing else):
// one line USER:PASSWORD, the user information of a NATS URL, so that
// NATS_URL="nats://$(cat data/nats-credentials)@127.0.0.1:4222" works for
// any client (the password the worker makes needs no escaping).
const File = "nats-credentials"

// ErrBad is what Parse and Option return for a file that is neither a
// NATS credentials file nor one line USER:PASSWORD.
var ErrBad = errors.New("want one line USER:PASSWORD or a NATS credentials file")

// Parse parses one line USER:PASSWORD; white space around it is dropped.
func Parse(data []byte) (user, password string, err error) {
	line := bytes.TrimSpace(data)
	u, p, ok := bytes.Cut(line, []byte(":"))
	if !ok || len(u) == 0 || len(p) == 0 || bytes.ContainsAny(line, "\r\n\x00") {
		return "", "", ErrBad
	}
	return string(u), string(p), nil
}

// Read reads a file of one line USER:PASSWORD. Its error names the file,
// never what is in it.
func Read(path string) (user, password string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	if user, password, err = Parse(data); err != nil {
		return "", "", fmt.Errorf("%s: %w", path, err)
	}
	return user, password, nil
}

// jwtHeader starts a NATS credentials file.
const jwtHeader = "-----BEGIN NATS USER JWT-----"

// Option returns the option that connects with the credentials in path:
// a NATS credentials file (a user JWT and its seed, as nsc writes) or one
// line USER:PASSWORD (File; a tenant of deploy/compose/tenants.sh and its
// password).
func Option(path string) (nats.Option, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if bytes.Contains(data, []byte(jwtHeader)) {
		return nats.UserCredentials(path), nil
	}
	user, password, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return nats.UserInfo(user, password), nil
}
