// Command gateway serves sandfleet's HTTP API (internal/gateway) over a fleet's
// NATS JetStream. It holds no job state: run as many as you like behind a
// load balancer. See Run for the flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandfleet/sandfleet/internal/cmdline"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case err == nil:
		os.Exit(0)
	case errors.Is(err, cmdline.ErrUsage):
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}
