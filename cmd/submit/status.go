package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandfleet/sandfleet/internal/shorten"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// statusCommand is "submit status": the fleet from its heartbeats.
type statusCommand struct {
	m   *Main
	out output
}

func (c *statusCommand) synopsis() string { return "status [--json]" }

func (c *statusCommand) about() string {
	return `Shows the live workers (from their heartbeats: queue, busy slots,
readiness, version) and each queue's backlog (pending, in flight,
redelivered).
`
}

func (c *statusCommand) define(fs *pflag.FlagSet) {
	c.out = output{m: c.m}
	c.out.define(fs, "print the status as one JSON object on stdout", false)
}

func (c *statusCommand) run(ctx context.Context, fs *pflag.FlagSet) error {
	if fs.NArg() != 0 {
		return usageError("status", "status takes no arguments, got %q", fs.Args())
	}
	client, closeConn, err := c.m.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := client.Status(ctx)
	if err != nil {
		return fail(exitUnavailable, "%w", err)
	}
	if c.out.json {
		c.out.printJSON(st)
		return nil
	}
	var table strings.Builder
	c.table(&table, st)
	c.out.text(c.m.Stdout, table.String())
	return nil
}

// table writes st as the tables of "submit status".
func (c *statusCommand) table(w io.Writer, st *jobs.FleetStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tQUEUE\tSLOTS\tREADY\tSTATE\tVERSION\tLAST SEEN\tUP")
	now := time.Now()
	for _, w := range st.Workers {
		state := "serving"
		if w.Draining {
			state = "draining"
		}
		ready := "yes"
		if !w.Ready {
			ready = "no"
			if w.LastError != "" {
				ready = "no (" + shorten.Text(w.LastError, 40) + ")"
			}
		}
		queue := w.Queue
		if len(w.Queues) > 1 {
			queue = strings.Join(w.Queues, ",") // lanes, name:weight
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d busy\t%s\t%s\t%s\t%s ago\t%s\n", w.ID, queue, w.Busy, w.Slots,
			ready, state, w.Version, ago(now, w.LastSeen), ago(now, w.StartedAt))
	}
	if len(st.Workers) == 0 {
		fmt.Fprintln(tw, "(no live workers)")
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "QUEUE\tPENDING\tIN FLIGHT\tREDELIVERED\tIDLE PULLS")
	for _, q := range st.Queues {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", q.Queue, q.Pending, q.InFlight, q.Redelivered, q.Waiting)
	}
	if len(st.Queues) == 0 {
		fmt.Fprintln(tw, "(no queue has been served yet)")
	}
	tw.Flush()
	fmt.Fprintf(w, "\nstream JOBS: %d jobs queued or running, %d bytes\n", st.Messages, st.Bytes)
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
