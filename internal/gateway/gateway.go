package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/console"
	"github.com/sandfleet/sandfleet/internal/mcp"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
	"github.com/sandfleet/sandfleet/pkg/templates"
)

// Config of a Gateway. The zero value of each field is its documented
// default.
type Config struct {
	// Tokens admitted with "Authorization: Bearer <secret>". Nil or empty
	// means no authentication at all: only for a gateway on a loopback
	// address (cmd/gateway and worker --embedded refuse anything else).
	Tokens *Tokens
	// Tenants are the connections of the tenants whose tokens
	// (tenant=T) the gateway serves, by tenant: each made with that
	// tenant's own credentials (DialTenant), its client
	// jobs.NewTenantClient's. A tenant's token is served over its
	// tenant's connection alone; New refuses a token of a tenant missing
	// here.
	Tenants map[string]Conn
	// MaxWait bounds ?wait= on submit and get: a longer wait is shortened
	// to it (the answer is then 202, and the client asks again).
	// Default 60s.
	MaxWait time.Duration
	// MaxJobBytes caps the body of POST /v1/jobs (413 past it). Default
	// jobs.MaxJobBytes, the largest job the fleet takes.
	MaxJobBytes int64
	// MaxBatchBytes caps the body of POST /v1/batches. Default 64 MiB. The
	// body is spooled to a file in TempDir, not held in memory.
	MaxBatchBytes int64
	// MaxBatchWindow caps ?window= of a batch. Default 1024.
	MaxBatchWindow int
	// MaxWaiting is the most requests waiting for results at once (long
	// polls); past it they get 429 too_many_requests. Default 1024.
	MaxWaiting int
	// MaxBatches is the most batches running at once. Default 16.
	MaxBatches int
	// MaxStreams is the most event streams (GET /v1/jobs/{id}/events) at
	// once: each holds a watch of its job's events and result for as long
	// as the job runs; past it, 429 too_many_requests. Default 256.
	MaxStreams int
	// MaxWaitingPerToken, MaxStreamsPerToken and MaxBatchesPerToken bound
	// what one token holds of MaxWaiting, MaxStreams and MaxBatches (and
	// of the batch bodies arriving, 4 × MaxBatchesPerToken), so that one
	// client cannot take every slot from the others. Defaults 256, 64
	// and 4.
	MaxWaitingPerToken int
	MaxStreamsPerToken int
	MaxBatchesPerToken int
	// MaxWaitingPerTenant, MaxStreamsPerTenant and MaxBatchesPerTenant
	// are the same bounds for all the tokens of one tenant together.
	// Defaults 512, 128 and 8.
	MaxWaitingPerTenant int
	MaxStreamsPerTenant int
	MaxBatchesPerTenant int
	// MaxTerminals is the most session terminals (GET
	// /v1/sessions/{id}/pty WebSockets) open at once, and
	// MaxTerminalsPerToken and MaxTerminalsPerTenant what one token and
	// one tenant hold of them; past them, 429. Defaults 64, 8 and 16.
	MaxTerminals          int
	MaxTerminalsPerToken  int
	MaxTerminalsPerTenant int
	// MaxTemplatesPerTenant is the most templates of its own one tenant
	// registers (PUT /v1/templates/{name} with a tenant's token), within
	// the registry's own cap for all (templates.MaxTemplates). Default
	// templates.DefaultTenantTemplates (16).
	MaxTemplatesPerTenant int
	// ReadTimeout bounds the reading of a request body. Default 60s.
	ReadTimeout time.Duration
	// WriteTimeout bounds the writing of a response (after a wait), and
	// of each line of a streamed one: a client that stops reading is cut
	// off. Default 30s.
	WriteTimeout time.Duration
	// RetryAfter is what Retry-After says on 429 and 503. Default 1s.
	RetryAfter time.Duration
	// TempDir holds batch bodies while they run. Default os.TempDir().
	TempDir string
	// Ready reports whether the gateway can reach NATS (/readyz). Nil
	// means always.
	Ready func() bool
	// NoConsole turns off the web console (internal/console) at /. Default: it
	// is served, with the same tokens as the API.
	NoConsole bool
	// ConsoleSessionTTL is how long a console login lasts. Default 12h.
	ConsoleSessionTTL time.Duration
	// MaxConsoleSessions bounds the console logins this gateway holds (in
	// memory: a restart ends them all); past it, a login ends the one
	// nearest its end. Default 10,000.
	MaxConsoleSessions int
	// PreviewKey signs the preview tokens of sessions' ports; gateways
	// behind one load balancer share it. Default: a random key, so that
	// this gateway's tokens end with it.
	PreviewKey []byte
	// Sessions serves /v1/sessions; nil answers them 501.
	Sessions *sessions.Client
	// MCP bounds the tools of /mcp and GET /v1/tools (mcp.Options: the
	// output a result holds, the images, the timeouts).
	MCP mcp.Options
	// Logger default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.MaxWait, 60*time.Second)
	def(&c.ReadTimeout, 60*time.Second)
	def(&c.WriteTimeout, 30*time.Second)
	def(&c.RetryAfter, time.Second)
	if c.MaxJobBytes <= 0 {
		c.MaxJobBytes = jobs.MaxJobBytes
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 64 << 20
	}
	if c.MaxBatchWindow <= 0 {
		c.MaxBatchWindow = 1024
	}
	if c.MaxWaiting <= 0 {
		c.MaxWaiting = 1024
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = 256
	}
	if c.MaxBatches <= 0 {
		c.MaxBatches = 16
	}
	for _, d := range []struct {
		v   *int
		def int
	}{
		{&c.MaxWaitingPerToken, 256}, {&c.MaxStreamsPerToken, 64}, {&c.MaxBatchesPerToken, 4},
		{&c.MaxWaitingPerTenant, 512}, {&c.MaxStreamsPerTenant, 128}, {&c.MaxBatchesPerTenant, 8},
		{&c.MaxTerminals, 64}, {&c.MaxTerminalsPerToken, 8}, {&c.MaxTerminalsPerTenant, 16},
		{&c.MaxTemplatesPerTenant, templates.DefaultTenantTemplates},
	} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if c.TempDir == "" {
		c.TempDir = os.TempDir()
	}
	if c.Ready == nil {
		c.Ready = func() bool { return true }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Gateway is the HTTP API over a fleet. It holds no job state: every
// answer comes from JetStream, so any number of gateways may serve the
// same fleet behind a load balancer. The console's logins are the one
// thing it keeps (in memory): a login opens pages on its own gateway.
type Gateway struct {
	views *views // what each token reaches
	// operatorNC is the operator's connection (nil when every token is a
	// tenant's): the console reads the job index on it.
	operatorNC *nats.Conn
	cfg        Config
	log        *slog.Logger
	mux        *http.ServeMux
	metrics    *gatewayMetrics
	console    *console.Console // nil with NoConsole
	// Slots of the kinds of long request (long polls, batches, event
	// streams, batch bodies arriving), taken before the work.
	waiting *slots
	batches *slots
	streams *slots
	uploads *slots
	ptys    *slots
	// The MCP server of /mcp, and its tools for GET /v1/tools.
	mcp     http.Handler
	mcpCall time.Duration
	// mcpServer runs POST /v1/tools/{name}'s calls.
	mcpServer *mcp.Server
	tools     []mcp.Def
	// The proxy of sessions' ports (ports.go), and the key that signs
	// their preview tokens.
	portProxy  *httputil.ReverseProxy
	previewKey []byte
}

// New returns a gateway over client, the operator's, which serves the
// tokens of no tenant (and an open gateway's callers); nc is the client's
// connection, on which the gateway takes the results of the jobs it waits
// for. client and nc may be nil when every token is a tenant's
// (cfg.Tenants serves those): such a gateway holds no operator
// credentials at all. Close releases them.
func New(client *jobs.Client, nc *nats.Conn, cfg Config) (*Gateway, error) {
	cfg.setDefaults()
	vs, err := newViews(Conn{Client: client, NC: nc}, cfg.Tenants, cfg.Tokens, cfg.Sessions)
	if err != nil {
		return nil, err
	}
	g := &Gateway{
		views:      vs,
		operatorNC: nc,
		cfg:        cfg,
		log:        cfg.Logger,
		mux:        http.NewServeMux(),
		metrics:    newMetrics(),
		waiting:    newSlots("waiting", "requests waiting for a result", cfg.MaxWaiting, cfg.MaxWaitingPerToken, cfg.MaxWaitingPerTenant),
		batches:    newSlots("batch", "batches running", cfg.MaxBatches, cfg.MaxBatchesPerToken, cfg.MaxBatchesPerTenant),
		streams:    newSlots("streams", "event streams open", cfg.MaxStreams, cfg.MaxStreamsPerToken, cfg.MaxStreamsPerTenant),
		ptys:       newSlots("terminals", "session terminals open", cfg.MaxTerminals, cfg.MaxTerminalsPerToken, cfg.MaxTerminalsPerTenant),
		uploads:    newSlots("upload", "batch bodies arriving", 4*cfg.MaxBatches, 4*cfg.MaxBatchesPerToken, 4*cfg.MaxBatchesPerTenant),
	}
	g.previewKey = cfg.PreviewKey
	if len(g.previewKey) == 0 {
		g.previewKey = newPreviewKey()
	}
	g.portProxy = g.newPortProxy()
	if err := g.newMCP(); err != nil {
		vs.close()
		return nil, err
	}
	paths := map[string][]string{}
	for _, rt := range g.routes() {
		g.mux.Handle(rt.pattern, g.wrap(rt))
		method, path, _ := strings.Cut(rt.pattern, " ")
		paths[path] = append(paths[path], method)
	}
	// The mux's own 404 and 405 answers are plain text: errors here are
	// always JSON.
	for path, methods := range paths {
		allow := strings.Join(methods, ", ")
		g.mux.Handle(path, g.wrap(route{pattern: path, routing: true, h: func(w http.ResponseWriter, _ *http.Request, _ *Token) error {
			w.Header().Set("Allow", allow)
			return apiErr(http.StatusMethodNotAllowed, CodeMethodNotAllow, "use %s", allow)
		}}))
	}
	// A session's port takes any method: the server in the session says
	// which it answers.
	g.mux.Handle(portPath, g.wrap(route{pattern: portPath, h: g.proxyPort, open: true, stream: true, body: 1 << 30}))
	if !cfg.NoConsole {
		if err := g.mountConsole(); err != nil {
			vs.close()
			return nil, err
		}
	}
	g.mux.Handle("/", g.wrap(route{pattern: "/", routing: true, h: func(http.ResponseWriter, *http.Request, *Token) error {
		return apiErr(http.StatusNotFound, CodeNotFound, "no such route (GET /openapi.yaml lists them)")
	}}))
	return g, nil
}

// Close stops taking results. Serve first.
func (g *Gateway) Close() { g.views.close() }

// ServeHTTP serves the API.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.mux.ServeHTTP(w, r) }

// handler is a route's function: it writes a response, or returns an
// error for wrap to write.
type handler func(w http.ResponseWriter, r *http.Request, tok *Token) error

// route is one endpoint and the limits that apply to it.
type route struct {
	pattern string // as http.ServeMux takes it: "METHOD /path/{var}"
	h       handler
	body    int64 // the most body bytes taken; 0: none
	open    bool  // served without a token (health, metrics, the document)
	write   bool  // submits or cancels: refused to a read-only token
	long    bool  // may wait up to MaxWait before answering
	stream  bool  // streams its answer: the handler sets a deadline per write
	// routing: the mux's own 404 or 405, answered from the method and
	// path alone (both public in openapi.yaml), whatever the body or
	// token: the body is not read, so its size is no reason to refuse.
	routing bool
}

// routes is the API: every endpoint, as openapi.yaml describes it.
func (g *Gateway) routes() []route {
	return []route{
		{pattern: "POST /v1/jobs", h: g.submit, write: true, body: g.cfg.MaxJobBytes, long: true},
		{pattern: "GET /v1/jobs/{id}", h: g.get, long: true},
		{pattern: "POST /v1/jobs/{id}/cancel", h: g.cancel, write: true, long: true},
		{pattern: "GET /v1/jobs/{id}/events", h: g.follow, stream: true},
		{pattern: "GET /v1/jobs/{id}/artifacts", h: g.artifacts},
		{pattern: "GET /v1/jobs/{id}/artifacts/{name...}", h: g.artifact, stream: true},
		{pattern: "GET /v1/workspaces/{name}", h: g.workspace},
		{pattern: "GET /v1/workspaces/{name}/snapshot", h: g.snapshot, stream: true},
		{pattern: "POST /v1/batches", h: g.submitBatch, write: true, body: g.cfg.MaxBatchBytes, stream: true},
		{pattern: "POST /v1/sessions", h: g.createSession, write: true, body: 16 << 20, long: true},
		{pattern: "GET /v1/sessions", h: g.listSessions},
		{pattern: "GET /v1/sessions/{id}", h: g.getSession},
		{pattern: "DELETE /v1/sessions/{id}", h: g.deleteSession, write: true},
		{pattern: "POST /v1/sessions/{id}/keepalive", h: g.keepaliveSession, write: true},
		{pattern: "PUT /v1/sessions/{id}/network", h: g.setSessionNetwork, write: true, body: 1 << 16},
		{pattern: "POST /v1/sessions/{id}/pause", h: g.pauseSession, write: true, long: true},
		{pattern: "POST /v1/sessions/{id}/resume", h: g.resumeSession, write: true, long: true},
		{pattern: "POST /v1/sessions/{id}/fork", h: g.forkSession, write: true, body: 1 << 16, long: true},
		{pattern: "POST /v1/sessions/{id}/exec", h: g.execSession, write: true, body: 16 << 20, stream: true},
		{pattern: "POST /v1/sessions/{id}/code", h: g.codeSession, write: true, body: 16 << 20, stream: true},
		{pattern: "GET /v1/sessions/{id}/processes", h: g.listProcesses},
		{pattern: "GET /v1/sessions/{id}/cells", h: g.listCells},
		{pattern: "GET /v1/sessions/{id}/contexts", h: g.listContexts},
		{pattern: "POST /v1/sessions/{id}/contexts", h: g.newContext, write: true, body: 1 << 12},
		{pattern: "DELETE /v1/sessions/{id}/contexts/{name}", h: g.endContext, write: true},
		{pattern: "GET /v1/sessions/{id}/processes/{pid}", h: g.readProcess, stream: true},
		{pattern: "POST /v1/sessions/{id}/processes/{pid}/signal", h: g.signalProcess, write: true, body: 1 << 10},
		{pattern: "POST /v1/sessions/{id}/processes/{pid}/stdin", h: g.stdinProcess, write: true, body: sessionapi.MaxFileChunk},
		{pattern: "GET /v1/sessions/{id}/files", h: g.listFiles},
		{pattern: "GET /v1/sessions/{id}/files/{path...}", h: g.readFile, stream: true},
		{pattern: "PUT /v1/sessions/{id}/files/{path...}", h: g.writeFile, write: true, body: 1 << 30, stream: true},
		{pattern: "DELETE /v1/sessions/{id}/files/{path...}", h: g.removeFile, write: true},
		{pattern: "GET /v1/sessions/{id}/pty", h: g.ptySession, write: true, stream: true},
		{pattern: "POST /v1/sessions/{id}/ports", h: g.exposePort, write: true, body: 1 << 10},
		{pattern: "GET /v1/sessions/{id}/ports", h: g.listPorts},
		{pattern: "DELETE /v1/sessions/{id}/ports/{port}", h: g.unexposePort, write: true},
		{pattern: "GET /v1/status", h: g.status},
		{pattern: "GET /v1/templates", h: g.listTemplates},
		{pattern: "GET /v1/templates/{name}", h: g.getTemplate},
		{pattern: "PUT /v1/templates/{name}", h: g.putTemplate, write: true, body: templates.MaxBytes},
		{pattern: "DELETE /v1/templates/{name}", h: g.deleteTemplate, write: true},
		{pattern: "GET /v1/tools", h: g.listTools},
		{pattern: "POST /v1/tools/{name}", h: g.callTool, write: true, body: g.cfg.MaxJobBytes + 64<<10, stream: true},
		// A session's POST waits for its tool calls and may stream them
		// (SSE); its GET is a stream of the server's messages.
		{pattern: "POST /mcp", h: g.serveMCP, write: true, body: g.cfg.MaxJobBytes + 64<<10, stream: true},
		{pattern: "GET /mcp", h: g.serveMCP, stream: true},
		{pattern: "DELETE /mcp", h: g.serveMCP, write: true},
		{pattern: "GET /healthz", h: g.healthz, open: true},
		{pattern: "GET /readyz", h: g.readyz, open: true},
		{pattern: "GET /metrics", h: g.serveMetrics, open: true},
		{pattern: "GET /openapi.yaml", h: serveDocument, open: true},
		{pattern: "GET /llms.txt", h: serveLLMsTxt, open: true},
	}
}

// mountConsole serves the web console at / with the API's tokens: a
// read-only token may look, not cancel. Its pages get what wrap gives
// every request but the API's authentication and JSON errors: the
// console answers HTML, and sends a browser without a token to its
// login form.
func (g *Gateway) mountConsole() error {
	ccfg := console.Config{Logger: g.log, SessionTTL: g.cfg.ConsoleSessionTTL, MaxSessions: g.cfg.MaxConsoleSessions}
	if g.cfg.Tokens.Len() > 0 {
		ccfg.Auth = func(secret string) *console.Viewer {
			tok := g.cfg.Tokens.Lookup(secret)
			if tok == nil {
				return nil
			}
			return &console.Viewer{Name: tok.Name, CanCancel: tok.CanWrite(), Scope: g.views.of(tok).Scope}
		}
	}
	if g.cfg.Sessions != nil {
		ccfg.Sessions = func(v *console.Viewer) *sessions.Client { return g.views.named(v.Name).sessions }
	}
	var open *jobs.Client // an open console's: the operator's
	if g.views.operator != nil {
		open = g.views.operator.Client()
	}
	if g.operatorNC != nil {
		js, err := jetstream.New(g.operatorNC)
		if err != nil {
			return err
		}
		ccfg.Index = js
	}
	c, err := console.New(open, ccfg)
	if err != nil {
		return err
	}
	g.console = c
	for _, rt := range c.Routes() {
		h := rt.Handler
		g.mux.Handle(rt.Pattern, g.wrap(route{pattern: rt.Pattern, open: true, body: 16 << 10,
			h: func(w http.ResponseWriter, r *http.Request, _ *Token) error {
				h.ServeHTTP(w, r)
				return nil
			}}))
	}
	return nil
}

func (g *Gateway) healthz(w http.ResponseWriter, _ *http.Request, _ *Token) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

func (g *Gateway) readyz(w http.ResponseWriter, _ *http.Request, _ *Token) error {
	if !g.cfg.Ready() {
		return apiErr(http.StatusServiceUnavailable, CodeUnavailable, "NATS is not connected")
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}

func (g *Gateway) status(w http.ResponseWriter, r *http.Request, tok *Token) error {
	st, err := g.views.of(tok).Client().Status(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// isNATSDown reports errors that mean NATS or JetStream did not answer.
func isNATSDown(err error) bool {
	for _, e := range []error{nats.ErrTimeout, nats.ErrConnectionClosed, nats.ErrNoResponders,
		nats.ErrConnectionReconnecting, nats.ErrDisconnected, jetstream.ErrNoStreamResponse,
		jetstream.ErrJetStreamNotEnabled} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Serve serves the gateway on ln until ctx ends, then shuts down: requests
// in progress get grace to finish, long polls and batch streams are cut
// after it (their jobs go on in the fleet).
func (g *Gateway) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	srv := g.Server()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Server returns an http.Server for the gateway with its connection-level
// limits; the per-request ones are wrap's.
func (g *Gateway) Server() *http.Server {
	return &http.Server{
		Handler:           g,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
}
