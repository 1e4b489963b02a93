package jobs_test

import (
	"context"
	"io"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/worker"
)

// startFleet starts what the examples run against, in-process: a NATS
// server with JetStream and one worker. The worker's executor stands in
// for the sandbox (internal/testutil/fakeexec): a job's code is a script
// of lines such as "print TEXT", "write FILE TEXT" and "cat FILE", so that
// the examples need no Docker. It returns the server's URL, where a real
// program would use its fleet's, and a function that stops both.
func startFleet() (url string, stop func()) {
	dir, err := os.MkdirTemp("", "sandfleet-example-")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		log.Fatal("the example's NATS server did not start")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(js, &fakeexec.Executor{}, worker.Config{ID: "example", Slots: 4,
		FetchWait: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		log.Fatal(err)
	}
	ctx, drain := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, context.Background()) }()
	return srv.ClientURL(), func() {
		drain()
		if err := <-done; err != nil {
			log.Print(err)
		}
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
		os.RemoveAll(dir)
	}
}
