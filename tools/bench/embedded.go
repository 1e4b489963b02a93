package main

import (
	"context"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/natsembed"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// embedded starts an in-process JetStream server on a free loopback port,
// its store in a fresh temporary directory named after phase; stop shuts
// it down and removes the store.
func embedded(phase string) (srv *server.Server, stop func(), err error) {
	dir, err := os.MkdirTemp("", "sandfleet-bench-"+phase+"-")
	if err != nil {
		return nil, nil, err
	}
	srv, err = natsembed.Start(natsembed.Options{Listen: "127.0.0.1:-1", StoreDir: dir})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return srv, func() {
		srv.Shutdown()
		srv.WaitForShutdown()
		os.RemoveAll(dir)
	}, nil
}

// openClient opens a job client on js, retrying for 10 s while the worker
// that was just started sets the topology up.
func openClient(ctx context.Context, js jetstream.JetStream) (*jobs.Client, error) {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		cli, err := jobs.NewClient(ctx, js, jobs.Config{})
		if err == nil || time.Now().After(deadline) {
			return cli, err
		}
	}
}
