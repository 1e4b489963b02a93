package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"
)

func (c *cli) status(args []string) int {
	fs := c.newFlagSet("status", "status [--json]")
	c.commonFlags(fs)
	fs.Lookup("json").Usage = "print the status as one JSON object on stdout"
	pos, exit, done := c.parseOrExit(fs, args)
	if done {
		return exit
	}
	if len(pos) != 0 {
		c.errorf("status takes no arguments, got %q", pos)
		return exitUsage
	}
	client, closeConn, exit := c.connect()
	if closeConn == nil {
		return exit
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	st, err := client.Status(ctx)
	if err != nil {
		c.errorf("%v", err)
		return exitUnavailable
	}
	if c.json {
		data, _ := json.Marshal(st)
		fmt.Fprintf(c.stdout, "%s\n", data)
		return exitOK
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
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
				ready = "no (" + truncateText(w.LastError, 40) + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d busy\t%s\t%s\t%s\t%s ago\t%s\n", w.ID, w.Queue, w.Busy, w.Slots,
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
	fmt.Fprintf(c.stdout, "\nstream JOBS: %d jobs queued or running, %d bytes\n", st.Messages, st.Bytes)
	return exitOK
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

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
