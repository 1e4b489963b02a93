package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/mcp"
	"github.com/sandfleet/sandfleet/internal/metrics"
	"github.com/sandfleet/sandfleet/internal/natsconn"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/sessions"
	"github.com/sandfleet/sandfleet/pkg/templates"
)

// version is set at build time with -ldflags "-X main.version=...".
var version string

const usage = `usage: gateway [--nats URL] [--listen ADDR] [--tokens FILE] [--max-wait D]
               [--max-waiting N] [--max-streams N] [--max-batches N]
               [--max-{waiting,streams,batches}-per-{token,tenant} N]
               [--max-terminals N] [--max-terminals-per-{token,tenant} N]
               [--console-session-ttl D] [--max-console-sessions N]
               [--tenant-creds T=FILE]... [--mcp-max-output BYTES]
       gateway token NAME [--queues Q1,Q2] [--role read] [--tenant T]
       gateway metrics

Serves sandfleet's HTTP API (GET /openapi.yaml describes it) over the
fleet's NATS JetStream. Without tokens (--tokens FILE or $SANDFLEET_TOKENS)
it serves anyone, and so listens on loopback only.

"gateway token NAME" makes a token: it prints the secret, which only the
client keeps, and the line for the token file, which holds its hash.
A token of --tenant T is tenant T's: it reaches T's jobs, workspaces and
batches alone, over a connection made with T's own NATS credentials
(--tenant-creds T=FILE, a NATS .creds file or one line USER:PASSWORD).
When every token is a tenant's, the gateway makes no connection of its
own: --nats then needs no user or password.

"gateway metrics" lists the metrics GET /metrics serves, one a line:
name, type, labels and help, separated by tabs.

The first SIGINT/SIGTERM stops it: requests in progress get --grace,
long polls and batch streams are then cut (their jobs go on).

Long requests (long polls, event streams, batches) are bounded three
ways: on the whole gateway (--max-waiting, --max-streams, --max-batches),
for each token (--max-*-per-token) and for each tenant, all its tokens
together (--max-*-per-tenant), so that one client cannot take every slot.

Flags:
`

// perLimits are the bounds of one token's (or tenant's) long requests.
type perLimits struct{ waiting, streams, batches, terminals int }

type options struct {
	natsURL   string
	listen    string
	tokens    string
	maxWait   time.Duration
	maxWaits  int
	maxStream int
	maxTerms  int
	maxBatch  int
	tenantTpl int // templates per tenant
	perToken  perLimits
	perTenant perLimits
	mcpOutput int
	grace     time.Duration
	sessTTL   time.Duration
	maxSess   int
	logFormat string
	logLevel  string
	version   bool
	queues    []string // gateway token
	role      string   // gateway token
	tenant    string   // gateway token
	creds     []string // T=FILE: each tenant's NATS credentials
}

func flagSet(o *options) *pflag.FlagSet {
	fs := cmdline.NewFlagSet("gateway")
	fs.StringVar(&o.natsURL, "nats", "", natsconn.URLHelp)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "`ADDR` to serve HTTP on")
	fs.StringVar(&o.tokens, "tokens", "", "token `FILE`: lines of NAME sha256:HEX [queues=Q1,Q2] [role=read] (default $"+gateway.EnvTokens+")")
	fs.DurationVar(&o.maxWait, "max-wait", 60*time.Second, "longest `D` a request may wait for a result (?wait=)")
	fs.IntVar(&o.maxWaits, "max-waiting", 1024, "most `N` requests waiting for a result at once (?wait=); past it 429 too_many_requests")
	fs.IntVar(&o.maxStream, "max-streams", 256, "most `N` event streams (GET /v1/jobs/{id}/events) at once; past it 429")
	fs.IntVar(&o.maxBatch, "max-batches", 16, "most `N` batches running at once, and 4 × N batch bodies arriving; past it 429")
	fs.IntVar(&o.perToken.waiting, "max-waiting-per-token", 256, "most `N` of --max-waiting one token holds")
	fs.IntVar(&o.perToken.streams, "max-streams-per-token", 64, "most `N` of --max-streams one token holds")
	fs.IntVar(&o.perToken.batches, "max-batches-per-token", 4, "most `N` of --max-batches one token holds (and 4 × N bodies arriving)")
	fs.IntVar(&o.perTenant.waiting, "max-waiting-per-tenant", 512, "most `N` of --max-waiting the tokens of one tenant hold together")
	fs.IntVar(&o.perTenant.streams, "max-streams-per-tenant", 128, "most `N` of --max-streams the tokens of one tenant hold together")
	fs.IntVar(&o.perTenant.batches, "max-batches-per-tenant", 8, "most `N` of --max-batches the tokens of one tenant hold together")
	fs.IntVar(&o.maxTerms, "max-terminals", 64, "most `N` session terminals (GET /v1/sessions/{id}/pty WebSockets) open at once; past it 429")
	fs.IntVar(&o.perToken.terminals, "max-terminals-per-token", 8, "most `N` of --max-terminals one token holds")
	fs.IntVar(&o.perTenant.terminals, "max-terminals-per-tenant", 16, "most `N` of --max-terminals the tokens of one tenant hold together")
	fs.IntVar(&o.tenantTpl, "max-templates-per-tenant", templates.DefaultTenantTemplates, "most `N` templates of its own one tenant registers (PUT /v1/templates/{name}); past it 429")
	fs.DurationVar(&o.sessTTL, "console-session-ttl", 12*time.Hour, "how long a console login lasts (`D`)")
	fs.IntVar(&o.maxSess, "max-console-sessions", 10_000, "most `N` console logins held (in memory); past it a login ends the oldest")
	fs.IntVar(&o.mcpOutput, "mcp-max-output", mcp.DefaultMaxOutput, "the most `BYTES` of text a tool result of /mcp holds (stdout and stderr cut in the middle past it; at least 1024)")
	fs.DurationVar(&o.grace, "grace", 5*time.Second, "on stop, `D` for requests in progress to finish")
	fs.StringVar(&o.logFormat, "log-format", "text", "log `FORMAT`: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.StringSliceVar(&o.queues, "queues", nil, "with token: the only `QUEUES` the token may submit to (default all)")
	fs.StringVar(&o.role, "role", "", "with token: `read` for a read-only token (the console without cancel; the API's GET routes)")
	fs.StringVar(&o.tenant, "tenant", "", "with token: the `TENANT` the token is (tenant=T in the file): it reaches that tenant's jobs and workspaces alone")
	fs.StringArrayVar(&o.creds, "tenant-creds", nil, "`T=FILE`: tenant T's NATS credentials (a .creds file, or one line USER:PASSWORD), with which its tokens are served; repeat for each tenant of the token file")
	return fs
}

// Run runs the gateway until ctx ends. Errors of the command line match
// cmdline.ErrUsage.
func Run(ctx context.Context, args []string, stdout io.Writer) error {
	o := &options{}
	fs := flagSet(o)
	err := cmdline.Parse(fs, args)
	if errors.Is(err, cmdline.ErrHelp) {
		fmt.Fprint(stdout, usage, cmdline.Usages(fs))
		return nil
	}
	if err != nil {
		return err
	}
	if o.version {
		fmt.Fprintln(stdout, "gateway", cmdline.Version(version))
		return nil
	}
	if fs.NArg() > 0 && fs.Arg(0) == "token" {
		if fs.NArg() != 2 {
			return cmdline.Usagef("token NAME: want one name")
		}
		secret, line, err := gateway.NewTokenWith(fs.Arg(1), gateway.TokenOptions{Queues: o.queues, Role: o.role, Tenant: o.tenant})
		if err != nil {
			return cmdline.Usagef("%w", err)
		}
		fmt.Fprintf(stdout, "token:       %s\ntokens file: %s\n", secret, line)
		return nil
	}
	if fs.NArg() == 1 && fs.Arg(0) == "metrics" {
		return metrics.WriteList(stdout, gateway.MetricDescs())
	}
	if fs.NArg() > 0 {
		return cmdline.Usagef("unexpected argument %q (see --help)", fs.Arg(0))
	}
	if fs.Changed("queues") || fs.Changed("role") || fs.Changed("tenant") {
		return cmdline.Usagef("--queues, --role and --tenant go with the token command")
	}
	creds, err := parseCreds(o.creds)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		n    int
	}{
		{"max-waiting", o.maxWaits}, {"max-streams", o.maxStream}, {"max-batches", o.maxBatch},
		{"max-waiting-per-token", o.perToken.waiting}, {"max-streams-per-token", o.perToken.streams},
		{"max-batches-per-token", o.perToken.batches}, {"max-waiting-per-tenant", o.perTenant.waiting},
		{"max-streams-per-tenant", o.perTenant.streams}, {"max-batches-per-tenant", o.perTenant.batches},
		{"max-terminals", o.maxTerms}, {"max-terminals-per-token", o.perToken.terminals}, {"max-terminals-per-tenant", o.perTenant.terminals},
		{"max-console-sessions", o.maxSess}, {"max-templates-per-tenant", o.tenantTpl},
	} {
		if f.n < 1 {
			return cmdline.Usagef("--%s %d: want 1 or more", f.name, f.n)
		}
	}
	if o.sessTTL < time.Second {
		return cmdline.Usagef("--console-session-ttl %s: want 1s or more", o.sessTTL)
	}
	if o.mcpOutput < 1024 {
		return cmdline.Usagef("--mcp-max-output %d: want 1024 or more", o.mcpOutput)
	}
	log, err := newLogger(o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	tokens, err := gateway.LoadTokens(o.tokens)
	if err != nil {
		return cmdline.Usagef("%w", err)
	}
	if err := gateway.CheckOpen(o.listen, tokens); err != nil {
		return cmdline.Usagef("--listen %w", err)
	}
	for _, t := range tokens.Tenants() {
		if creds[t] == "" {
			return cmdline.Usagef("a token is tenant %s's: give its NATS credentials, --tenant-creds %s=FILE", t, t)
		}
	}
	for t := range creds {
		if !slices.Contains(tokens.Tenants(), t) {
			return cmdline.Usagef("--tenant-creds %s: no token is tenant %s's", t, t)
		}
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	defer ln.Close()

	var conns []*nats.Conn // every connection, for /readyz
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	tenants := map[string]gateway.Conn{}
	for t, file := range creds {
		c, err := gateway.DialTenant(natsconn.Config{URL: o.natsURL, Name: "sandfleet-gateway-" + t, Persistent: true, Log: log.With("tenant", t)},
			t, file, jobs.Config{})
		if err != nil {
			return err
		}
		conns = append(conns, c.NC)
		tenants[t] = c
	}
	// The operator's connection only for what needs it: a gateway whose
	// tokens are all tenants' holds no credentials but theirs.
	var client *jobs.Client
	var sess *sessions.Client
	var nc *nats.Conn
	if tokens.Len() == 0 || tokens.Operators() {
		var js jetstream.JetStream
		nc, js, err = natsconn.JetStream(natsconn.Config{URL: o.natsURL, Name: "sandfleet-gateway", Persistent: true, Log: log})
		if err != nil {
			return err
		}
		conns = append(conns, nc)
		if client, err = gateway.Open(ctx, js, log); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if sess, err = sessions.NewClient(ctx, js, ""); err != nil {
			log.Warn("sessions not served", "err", err)
			sess = nil
		}
	}
	ready := func() bool {
		for _, nc := range conns {
			if !nc.IsConnected() {
				return false
			}
		}
		return true
	}
	gw, err := gateway.New(client, nc, gateway.Config{
		Tokens: tokens, Tenants: tenants, MaxWait: o.maxWait, Ready: ready, Logger: log, Sessions: sess,
		MaxWaiting: o.maxWaits, MaxStreams: o.maxStream, MaxBatches: o.maxBatch,
		MaxWaitingPerToken: o.perToken.waiting, MaxStreamsPerToken: o.perToken.streams,
		MaxBatchesPerToken: o.perToken.batches, MaxWaitingPerTenant: o.perTenant.waiting,
		MaxStreamsPerTenant: o.perTenant.streams, MaxBatchesPerTenant: o.perTenant.batches,
		MaxTerminals: o.maxTerms, MaxTerminalsPerToken: o.perToken.terminals, MaxTerminalsPerTenant: o.perTenant.terminals,
		ConsoleSessionTTL: o.sessTTL, MaxConsoleSessions: o.maxSess, MaxTemplatesPerTenant: o.tenantTpl,
		MCP: mcp.Options{MaxOutput: o.mcpOutput, Version: cmdline.Version(version)},
	})
	if err != nil {
		return err
	}
	defer gw.Close()
	auth := "none (loopback only)"
	if tokens.Len() > 0 {
		auth = fmt.Sprintf("%d bearer tokens", tokens.Len())
	}
	log.Info("serving the HTTP API", "addr", ln.Addr().String(), "auth", auth, "tenants", strings.Join(tokens.Tenants(), ","), "operator_connection", client != nil)
	return gw.Serve(ctx, ln, o.grace)
}

// parseCreds reads --tenant-creds T=FILE flags.
func parseCreds(flags []string) (map[string]string, error) {
	creds := map[string]string{}
	for _, f := range flags {
		t, file, ok := strings.Cut(f, "=")
		switch {
		case !ok || file == "":
			return nil, cmdline.Usagef("--tenant-creds %q: want T=FILE", f)
		case !jobs.ValidTenant(t):
			return nil, cmdline.Usagef("--tenant-creds %q: tenant %q must match [a-z0-9][a-z0-9-]{0,31}", f, t)
		case creds[t] != "":
			return nil, cmdline.Usagef("--tenant-creds: tenant %s given twice", t)
		}
		creds[t] = file
	}
	return creds, nil
}

func newLogger(format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, cmdline.Usagef("--log-level %q: want debug, info, warn or error", level)
	}
	ho := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, ho)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, ho)), nil
	}
	return nil, cmdline.Usagef("--log-format %q: want text or json", format)
}
