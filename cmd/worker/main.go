// Command worker pulls sandfleet jobs from NATS JetStream and runs each in a
// locked-down Docker sandbox. See Run for the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
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
	err := Run(stop, force, os.Args[1:])
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}
