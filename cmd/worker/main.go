// Command worker pulls sandfleet jobs from NATS JetStream and runs each in a
// locked-down Docker sandbox. See Run for the flags.
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
	stop, drain := context.WithCancel(context.Background())
	force, forceNow := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	go func() {
		// First SIGINT/SIGTERM drains; a second one, or SIGQUIT, forces.
		if s := <-sigs; s == syscall.SIGQUIT {
			forceNow()
		}
		drain()
		<-sigs
		forceNow()
	}()
	err := Run(stop, force, os.Args[1:], os.Stdout)
	switch {
	case err == nil:
		os.Exit(0)
	case errors.Is(err, cmdline.ErrUsage):
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}
