package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// contexts lists session id's code contexts, or starts one (new: in
// --cwd, of --language, named --context) or ends one (rm NAME).
func (c *sessionCommand) contexts(ctx context.Context, client *sessions.Client, id string, args []string) error {
	switch {
	case len(args) == 0:
	case args[0] == "new" && len(args) == 1:
		cx, err := client.NewContext(ctx, id, sessionapi.ContextRequest{Name: c.context, Language: c.language, Cwd: c.cwd})
		if err != nil {
			return sessionFailed(err)
		}
		if c.out.json {
			c.out.printJSON(cx)
			return nil
		}
		fmt.Fprintln(c.m.Stdout, cx.Name)
		return nil
	case args[0] == "rm" && len(args) == 2:
		if err := client.EndContext(ctx, id, args[1]); err != nil {
			return sessionFailed(err)
		}
		return nil
	default:
		return usageError("session", "session contexts ID [new | rm NAME]: not %q", args)
	}
	list, err := client.Contexts(ctx, id)
	if err != nil {
		return sessionFailed(err)
	}
	if c.out.json {
		if list == nil {
			list = []sessionapi.Context{}
		}
		c.out.printJSON(list)
		return nil
	}
	tw := tabwriter.NewWriter(c.m.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tLANGUAGE\tCELLS\tAGE\tCWD")
	now := time.Now()
	for _, cx := range list {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", cx.Name, cx.Language, cx.Cells, ago(now, time.UnixMilli(cx.Created)), cx.Cwd)
	}
	if len(list) == 0 {
		fmt.Fprintln(tw, "(no contexts)")
	}
	return tw.Flush()
}
