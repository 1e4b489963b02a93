package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandfleet/sandfleet/pkg/templates"
)

// templateCommand is "submit template": the fleet's registry of
// templates, an operator's.
type templateCommand struct {
	m   *Main
	out output
}

func (c *templateCommand) synopsis() string {
	return "template add FILE|- | ls | show NAME | rm NAME [--json]"
}

func (c *templateCommand) about() string {
	return `Registers, lists, shows and removes the fleet's templates: named images
with a preset's commands, default and maximum limits, env, a start
command and a ready check, and a warm pool of their own. A job or session
names one as its image ("image": "NAME"); workers pick registrations up
without a restart. add reads one template as JSON (docs/templates.md has
its fields) from FILE or stdin and registers it, or a new version of it.
`
}

func (c *templateCommand) define(fs *pflag.FlagSet) {
	c.out = output{m: c.m}
	c.out.define(fs, "print templates as JSON on stdout", false)
}

func (c *templateCommand) run(ctx context.Context, fs *pflag.FlagSet) error {
	args := fs.Args()
	if len(args) == 0 {
		return usageError("template", "template needs add, ls, show or rm")
	}
	want := map[string]int{"add": 1, "ls": 0, "show": 1, "rm": 1}
	n, ok := want[args[0]]
	if !ok || len(args)-1 != n {
		return usageError("template", "template %s: wrong arguments %q", args[0], args[1:])
	}
	if c.m.tenant != "" {
		return usageError("template", "--tenant: this command reaches the registry over NATS, as the operator; a tenant registers its own templates over HTTP (PUT /v1/templates/NAME)")
	}
	nc, js, err := c.m.dial()
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reg, err := templates.Open(ctx, js, 0)
	if err != nil {
		return fail(exitUnavailable, "%w", err)
	}
	switch args[0] {
	case "add":
		return c.add(ctx, reg, args[1])
	case "ls":
		list, err := reg.List(ctx, "")
		if err != nil {
			return fail(exitUnavailable, "%w", err)
		}
		if c.out.json {
			c.out.printJSON(list)
			return nil
		}
		var b strings.Builder
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tVERSION\tIMAGE\tPOOL\tUPDATED")
		for _, t := range list {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\n", t.Name, t.Version, t.Image, t.Pool, t.Updated.Format(time.RFC3339))
		}
		tw.Flush()
		c.out.text(c.m.Stdout, b.String())
		return nil
	case "show":
		t, err := reg.Get(ctx, "", args[1])
		if err != nil {
			return templateFailed(err)
		}
		c.printTemplate(t)
		return nil
	}
	if err := reg.Delete(ctx, "", args[1]); err != nil {
		return templateFailed(err)
	}
	return nil
}

func (c *templateCommand) add(ctx context.Context, reg *templates.Registry, from string) error {
	var r io.Reader = c.m.Stdin
	if from != "-" {
		f, err := os.Open(from)
		if err != nil {
			return usageError("template", "%v", err)
		}
		defer f.Close()
		r = f
	}
	dec := json.NewDecoder(io.LimitReader(r, templates.MaxBytes+1))
	dec.DisallowUnknownFields()
	var t templates.Template
	if err := dec.Decode(&t); err != nil {
		return usageError("template", "template add: %s: not a template's JSON: %v", from, err)
	}
	stored, err := reg.Put(ctx, t)
	if err != nil {
		return templateFailed(err)
	}
	c.printTemplate(stored)
	return nil
}

func (c *templateCommand) printTemplate(t *templates.Template) {
	if c.out.json {
		c.out.printJSON(t)
		return
	}
	data, _ := json.MarshalIndent(t, "", "  ")
	c.out.text(c.m.Stdout, string(data)+"\n")
}

func templateFailed(err error) error {
	switch {
	case errors.Is(err, templates.ErrNotFound):
		return fail(exitNotFound, "%v", err)
	case errors.Is(err, templates.ErrInvalid), errors.Is(err, templates.ErrFull):
		return fail(exitUsage, "%v", err)
	}
	return fail(exitUnavailable, "%w", err)
}
