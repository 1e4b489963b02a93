package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"os"

	"github.com/spf13/pflag"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/internal/mcp"
	"github.com/sandfleet/sandfleet/internal/natsurl"
)

// The environment `submit mcp` reads for a gateway: an MCP client's
// config sets them, keeping the token out of the command line.
const (
	envURL   = "SANDFLEET_URL"
	envToken = "SANDFLEET_TOKEN"
)

// mcpCommand is "submit mcp": an MCP server on stdin and stdout, for an
// agent that starts it as a subprocess.
type mcpCommand struct {
	m    *Main
	url  string
	opts mcp.Options
}

func (c *mcpCommand) synopsis() string { return "mcp [--url URL] [--max-output BYTES]" }

func (c *mcpCommand) about() string {
	return `Serves sandfleet's tools (run_code) to an MCP client on stdin and
stdout: an agent starts it as a subprocess, e.g. with the config
{"command": "submit", "args": ["mcp"]}. Nothing but the protocol goes to
stdout; logs go to stderr.

Jobs go through the gateway at --url ($` + envURL + `), with the token in
$` + envToken + `, or, without a URL or with --nats, straight to NATS.
A failing program or a timeout is a tool result with isError; each
result's text is at most --max-output bytes, images at most
--max-image-bytes.
`
}

func (c *mcpCommand) define(fs *pflag.FlagSet) {
	fs.StringVar(&c.url, "url", os.Getenv(envURL), "the gateway `URL` to run jobs through (token in $"+envToken+"); default $"+envURL+", none: NATS")
	fs.IntVar(&c.opts.MaxOutput, "max-output", mcp.DefaultMaxOutput, "the most `BYTES` of text a tool result holds (stdout and stderr cut in the middle past it)")
	fs.Int64Var(&c.opts.MaxImageBytes, "max-image-bytes", mcp.DefaultMaxImageBytes, "the most `BYTES` of images a result carries as image content (the rest are links); negative: none")
}

func (c *mcpCommand) run(ctx context.Context, fs *pflag.FlagSet) error {
	if fs.NArg() != 0 {
		return usageError("mcp", "mcp takes no arguments, got %q", fs.Args())
	}
	if fs.Changed("nats") && fs.Changed("url") {
		return usageError("mcp", "--nats and --url: give one (the gateway, or NATS)")
	}
	c.opts.Logger = slog.New(slog.NewTextHandler(c.m.Stderr, nil))
	c.opts.Version = cmdline.Version(version)
	var runner mcp.Runner
	switch {
	case c.url != "" && !fs.Changed("nats"):
		u, err := url.Parse(c.url)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return usageError("mcp", "--url %q: want http://HOST[:PORT] or https://...", c.url)
		}
		hr := &mcp.HTTPRunner{URL: c.url, Token: os.Getenv(envToken)}
		if err := hr.Check(ctx); errors.Is(err, mcp.ErrUnauthorized) {
			return fail(exitUsage, "%s: %v (set $%s)", natsurl.Redact(c.url), err, envToken)
		} else if err != nil {
			// The gateway may come up later: each call says what it finds.
			c.m.warnf("%s: %v", natsurl.Redact(c.url), err)
		}
		runner = hr
	default:
		client, closeConn, err := c.m.connect(ctx)
		if err != nil {
			return err
		}
		defer closeConn()
		runner = mcp.ClientRunner{Client: client}
	}
	srv, err := mcp.NewServer(c.opts, func(*mcp.Caller) (mcp.Runner, error) { return runner, nil })
	if err != nil {
		return usageError("mcp", "%v", err)
	}
	return srv.ServeStdio(ctx, io.NopCloser(c.m.Stdin), nopWriteCloser{c.m.Stdout})
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
