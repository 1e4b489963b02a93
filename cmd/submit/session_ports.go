package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// ports exposes (expose ID PORT), unexposes (unexpose ID PORT) or lists
// (ports ID) a session's ports, and prints the ports it exposes then. A
// preview token is the gateway's (signed with its key), so none is made
// here: the gateway's POST /v1/sessions/{id}/ports gives one.
func (c *sessionCommand) ports(ctx context.Context, client *sessions.Client, verb string, args []string) error {
	id := args[0]
	var ports []int
	var err error
	switch verb {
	case "ports":
		ports, err = client.Ports(ctx, id)
	default:
		port, perr := strconv.Atoi(args[1])
		if perr != nil {
			return usageError("session", "session %s: PORT %q: a number from %d to 65535", verb, args[1], sessions.MinPort)
		}
		if verb == "expose" {
			ports, err = client.Expose(ctx, id, port)
		} else {
			ports, err = client.Unexpose(ctx, id, port)
		}
	}
	if err != nil {
		return sessionFailed(err)
	}
	if c.out.json {
		if ports == nil {
			ports = []int{}
		}
		c.out.printJSON(ports)
		return nil
	}
	for _, p := range ports {
		fmt.Fprintln(c.m.Stdout, p)
	}
	return nil
}
