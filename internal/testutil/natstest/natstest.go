// Package natstest gives tests an in-process JetStream server (the same
// embedded server as worker --embedded) and connections to it, each torn
// down when the test ends.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/natsembed"
)

// Server starts a JetStream server on a free loopback port with its store
// in a fresh temporary directory, and shuts it down at cleanup.
func Server(t testing.TB) *server.Server {
	t.Helper()
	srv, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv
}

// ServerWith starts a server with opts (users, permissions, JetStream or
// not), waits until it accepts connections, and shuts it down at cleanup.
// NoSigs and NoLog are always set.
func ServerWith(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	opts.NoSigs, opts.NoLog = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready within 10s")
	}
	return s
}

// Connect connects to url and returns the connection and its JetStream
// context; the connection is closed at cleanup.
func Connect(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// Stores opens the fleet's stream and buckets on js, creating with the
// defaults those that are missing, for a test that reads or writes them
// as a worker would (a client of pkg/jobs has no handle on them).
func Stores(t testing.TB, js jetstream.JetStream) *fleet.Stores {
	t.Helper()
	st, err := fleet.Topology{}.Open(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
