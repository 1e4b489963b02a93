package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/mcp"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// The worker can serve the HTTP API (internal/gateway) itself, so that
// `worker --embedded` (make run) is a whole one-machine fleet with an
// HTTP endpoint. Everything of it lives in this file.

// defaultHTTP is where --embedded serves the API unless told otherwise.
const defaultHTTP = "127.0.0.1:8080"

type httpOptions struct {
	addr     string
	tokens   string
	explicit bool // --http given: failing to listen is an error
	// What one token holds of the API's long requests (the gateway's
	// own bounds, and those per tenant, are its defaults).
	perToken struct{ waiting, streams, batches int }
}

func httpFlags(fs *pflag.FlagSet, o *httpOptions) {
	fs.StringVar(&o.addr, "http", "", "serve the HTTP API on `ADDR` (with --embedded the default is "+defaultHTTP+"; \"\" turns it off)")
	fs.StringVar(&o.tokens, "tokens", "", "the HTTP API's token `FILE` (default $"+gateway.EnvTokens+"; none: loopback only)")
	fs.IntVar(&o.perToken.waiting, "http-max-waiting-per-token", 256, "the HTTP API's most `N` long polls (?wait=) of one token; past it 429")
	fs.IntVar(&o.perToken.streams, "http-max-streams-per-token", 64, "the HTTP API's most `N` event streams of one token; past it 429")
	fs.IntVar(&o.perToken.batches, "http-max-batches-per-token", 4, "the HTTP API's most `N` batches running of one token; past it 429")
}

// resolve applies the default and checks the flags once they are parsed.
func (o *httpOptions) resolve(fs *pflag.FlagSet, embedded bool) error {
	o.explicit = fs.Changed("http")
	if !o.explicit && embedded {
		o.addr = defaultHTTP
	}
	if o.addr == "" {
		if fs.Changed("tokens") {
			return cmdline.Usagef("--tokens goes with the HTTP API (--http ADDR or --embedded)")
		}
		return nil
	}
	for name, n := range map[string]int{"waiting": o.perToken.waiting, "streams": o.perToken.streams, "batches": o.perToken.batches} {
		if n < 1 {
			return cmdline.Usagef("--http-max-%s-per-token %d: want 1 or more", name, n)
		}
	}
	tokens, err := gateway.LoadTokens(o.tokens)
	if err != nil {
		return cmdline.Usagef("--tokens: %w", err)
	}
	if err := gateway.CheckOpen(o.addr, tokens); err != nil {
		return cmdline.Usagef("--http %w", err)
	}
	return nil
}

// startHTTP serves the API on js until the returned stop is called. When
// the address was not asked for and is taken (another worker, a test),
// the worker goes on without it and says so.
func startHTTP(o *httpOptions, js jetstream.JetStream, natsUp func() bool, log *slog.Logger) (stop func(), err error) {
	if o.addr == "" {
		return func() {}, nil
	}
	tokens, err := gateway.LoadTokens(o.tokens)
	if err != nil {
		return nil, cmdline.Usagef("--tokens: %w", err)
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		if !o.explicit && errors.Is(err, syscall.EADDRINUSE) {
			log.Warn("HTTP API not served: its address is in use (--http ADDR serves it elsewhere)", "addr", o.addr)
			return func() {}, nil
		}
		return nil, fmt.Errorf("--http: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		defer ln.Close()
		client, err := gateway.Open(ctx, js, log)
		if err != nil {
			return // stopped before the fleet answered
		}
		sess, err := sessions.NewClient(ctx, js, "")
		if err != nil {
			log.Warn("sessions not served over HTTP", "err", err)
			sess = nil
		}
		gw, err := gateway.New(client, js.Conn(), gateway.Config{Tokens: tokens, Ready: natsUp, Logger: log, Sessions: sess, MCP: mcp.Options{Version: cmdline.Version(version)},
			MaxWaitingPerToken: o.perToken.waiting, MaxStreamsPerToken: o.perToken.streams, MaxBatchesPerToken: o.perToken.batches})
		if err != nil {
			log.Error("HTTP API not served", "err", err)
			return
		}
		defer gw.Close()
		log.Info("serving the HTTP API", "addr", ln.Addr().String(), "tokens", tokens.Len())
		if err := gw.Serve(ctx, ln, time.Second); err != nil {
			log.Error("HTTP API stopped", "err", err)
		}
	})
	return func() { cancel(); wg.Wait() }, nil
}
