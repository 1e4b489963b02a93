// Package natscreds is the file that holds the user and password of the
// NATS server of worker --embedded: written by the worker, read by submit.
package natscreds

import (
	"bytes"
	"errors"
	"fmt"
	"os"
)

// File is the file, in the data directory of worker --embedded,
// that holds the user and password its NATS server takes (and nothing
// else): one line USER:PASSWORD, the user information of a NATS URL, so
// that NATS_URL="nats://$(cat data/nats-credentials)@127.0.0.1:4222"
// works for any client.
const File = "nats-credentials"

// ErrBad is what Parse returns for a file that is not
// one line USER:PASSWORD.
var ErrBad = errors.New("want one line USER:PASSWORD")

// Parse parses the contents of a credentials file.
func Parse(data []byte) (user, password string, err error) {
	line := bytes.TrimSuffix(data, []byte("\n"))
	u, p, ok := bytes.Cut(line, []byte(":"))
	if !ok || len(u) == 0 || len(p) == 0 || bytes.ContainsAny(line, "\r\n\x00") {
		return "", "", ErrBad
	}
	return string(u), string(p), nil
}

// Read reads a credentials file. Its error names the file, never
// what is in it.
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
