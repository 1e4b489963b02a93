// Command submit sends jobs to a sandfleet fleet and reads their results.
// See Main.Run for the commands and exitCode for how it ends.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := NewMain().Run(ctx, os.Args[1:])
	stop()
	os.Exit(exitCode(err, os.Stderr))
}
