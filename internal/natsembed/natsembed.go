// Package natsembed runs a NATS server with JetStream in-process: the
// one-machine mode of cmd/worker, and the server of the tests.
package natsembed

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// MaxPayload admits the largest job (jobs.MaxJobBytes, 4 MiB) with room to
// spare.
const MaxPayload = 8 << 20

// Options of an embedded server.
type Options struct {
	// Listen is host:port. Default 127.0.0.1:4222; port "-1" picks a free one.
	Listen string
	// StoreDir holds the JetStream file store. Required.
	StoreDir string
	// ReadyTimeout bounds the wait for the server to accept connections.
	// Default 10s.
	ReadyTimeout time.Duration
	// User and Password, when Password is set, are the only credentials
	// the server takes (see Credentials); without them it takes any
	// connection, as the tests' servers do.
	User, Password string
}

// Start starts the server and waits until it accepts connections. The
// caller owns it: Shutdown then WaitForShutdown.
func Start(o Options) (*server.Server, error) {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:4222"
	}
	if o.StoreDir == "" {
		return nil, errors.New("natsembed: StoreDir is required")
	}
	if o.Password != "" && o.User == "" {
		return nil, errors.New("natsembed: a Password needs a User")
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 10 * time.Second
	}
	host, portStr, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("natsembed: listen %q: %w", o.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("natsembed: listen %q: bad port", o.Listen)
	}
	s, err := server.NewServer(&server.Options{
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		MaxPayload: MaxPayload,
		NoSigs:     true,
		Username:   o.User,
		Password:   o.Password,
	})
	if err != nil {
		return nil, fmt.Errorf("natsembed: %w", err)
	}
	s.Start() // returns at once; Shutdown stops what it started
	if !s.ReadyForConnections(o.ReadyTimeout) {
		s.Shutdown()
		return nil, fmt.Errorf("natsembed: server on %s not ready after %s", o.Listen, o.ReadyTimeout)
	}
	return s, nil
}

// ClientURL is the URL of s with the user and password of o in it: what a
// client of the same process connects with.
func ClientURL(s *server.Server, o Options) string {
	u, err := url.Parse(s.ClientURL())
	if err != nil || o.Password == "" {
		return s.ClientURL()
	}
	u.User = url.UserPassword(o.User, o.Password)
	return u.String()
}
