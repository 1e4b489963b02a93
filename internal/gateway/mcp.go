package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/sandfleet/sandfleet/internal/mcp"
	"github.com/sandfleet/sandfleet/internal/webauth"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// newMCP builds the MCP server of /mcp: its tools run jobs as the token
// that calls them, under the same rules as POST /v1/jobs (admit).
func (g *Gateway) newMCP() error {
	opts := g.cfg.MCP
	opts.Sessions = g.cfg.Sessions != nil
	if opts.Logger == nil {
		opts.Logger = g.log
	}
	srv, err := mcp.NewServer(opts, func(c *mcp.Caller) (mcp.Runner, error) {
		var tok *Token
		if c != nil {
			tok, _ = c.Value.(*Token)
		}
		v := g.views.of(tok)
		return gatewayRunner{ClientRunner: mcp.ClientRunner{Client: v.Client(), Admit: func(job *jobs.Job) error {
			return g.admit(job, tok, v)
		}}, view: v, g: g, tok: tok}, nil
	})
	if err != nil {
		return err
	}
	g.tools, g.mcpCall, g.mcpServer = srv.Definitions(), srv.MaxCall(), srv
	g.mcp = srv.HTTPHandler(mcp.HTTPOptions{MaxBodyBytes: g.cfg.MaxJobBytes + 64<<10})
	return nil
}

// gatewayRunner reads results as the API's routes do (pathJob): a job
// outside the token's scope is not found.
type gatewayRunner struct {
	mcp.ClientRunner
	view *view
	g    *Gateway
	tok  *Token
}

var _ mcp.PortExposer = gatewayRunner{}

// ExposePort exposes port of session id as POST /v1/sessions/{id}/ports
// does, with the default ttl.
func (r gatewayRunner) ExposePort(ctx context.Context, base, id string, port int, wait time.Duration) (*mcp.PortLink, error) {
	c, err := r.g.sessionsOf(r.tok)
	if err != nil {
		return nil, err
	}
	if wait > MaxExposeWait {
		wait = MaxExposeWait
	}
	p, err := r.g.expose(ctx, c, r.view.Tenant(), tokenName(r.tok), id, port, "", wait)
	if err != nil {
		return nil, err
	}
	return &mcp.PortLink{URL: base + portPrefix(id, port), Token: p.Token, ExpiresAt: *p.ExpiresAt}, nil
}

// Run holds one of the gateway's waiting slots while the call waits for
// its job, as POST /v1/jobs?wait= does: a token's tool calls count
// against its share (--max-waiting-per-token) and the gateway's.
func (r gatewayRunner) Run(ctx context.Context, job *jobs.Job) (*jobs.Result, error) {
	release, err := r.g.take(r.g.waiting, r.tok)
	if err != nil {
		return nil, err
	}
	defer release()
	return r.ClientRunner.Run(ctx, job)
}

// Sessions is the token's sessions (nil where the gateway serves none).
func (r gatewayRunner) Sessions() *sessions.Client { return r.view.sessions }

func (r gatewayRunner) Result(ctx context.Context, id string) (*jobs.Result, error) {
	q, err := r.view.Job(id)
	if err != nil {
		return nil, jobs.ErrNotFound
	}
	return r.ClientRunner.Result(ctx, q)
}

// serveMCP: /mcp, the Streamable HTTP transport of MCP. wrap has checked
// the token (and, on an open gateway, Host and Origin) as for the API.
func (g *Gateway) serveMCP(w http.ResponseWriter, r *http.Request, tok *Token) error {
	// Where the call came to, for the URLs a tool gives (expose_port);
	// what a client sent under that name is not believed.
	r.Header.Set(mcp.HeaderBaseURL, baseURL(r))
	if tok != nil {
		if webauth.Bearer(r.Header.Get("Authorization")) == "" {
			// The console's cookie is for its pages, not for a session
			// of tools.
			return apiErr(http.StatusUnauthorized, CodeUnauthorized, "a bearer token is required (Authorization: Bearer <token>)")
		}
		r = mcp.WithCaller(r, &mcp.Caller{Name: tok.Name, Value: tok, BaseURL: baseURL(r)})
	}
	if r.Method == http.MethodPost {
		// A POST holds a tool call for as long as its job may take; a
		// client that stops reading the answer is cut off after that.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(g.mcpCall + g.cfg.WriteTimeout))
	}
	g.mcp.ServeHTTP(w, r)
	return nil
}

// listTools: GET /v1/tools?format=openai|anthropic|mcp: the tools of /mcp
// as function-calling definitions, made from the same definitions.
func (g *Gateway) listTools(w http.ResponseWriter, r *http.Request, _ *Token) error {
	format := r.URL.Query().Get("format")
	if format == "" {
		format = mcp.FormatMCP
	}
	data, ok := mcp.ToolsJSON(g.tools, format)
	if !ok {
		return apiErr(http.StatusBadRequest, CodeInvalidRequest, "format %q: want one of openai, anthropic, mcp", format)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, err := w.Write(append(data, '\n'))
	return err
}

// callTool: POST /v1/tools/{name}: one tool call, its body the call's
// arguments (a JSON object), answered with the MCP tool result
// ({"content": [...], "isError": bool}) that a tools/call of /mcp gives:
// the same handler, schema and bounds. The clients' dispatchers turn it
// into an OpenAI tool message or an Anthropic tool_result block. A
// failing program is a 200 with isError; only a call that names no tool,
// or whose body is not JSON, is an HTTP error.
func (g *Gateway) callTool(w http.ResponseWriter, r *http.Request, tok *Token) error {
	name := r.PathValue("name")
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(data)) > 0 && !json.Valid(data) {
		return apiErr(http.StatusBadRequest, CodeInvalidJSON, "the body must be the tool's arguments, a JSON object")
	}
	c := &mcp.Caller{BaseURL: baseURL(r)} // an open gateway's: no token
	if tok != nil {
		c = &mcp.Caller{Name: tok.Name, Value: tok, BaseURL: baseURL(r)}
	}
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(g.mcpCall + g.cfg.WriteTimeout))
	res, err := g.mcpServer.Call(r.Context(), c, name, data)
	if errors.Is(err, mcp.ErrNoTool) {
		return apiErr(http.StatusNotFound, CodeNotFound, "no tool %q (GET /v1/tools lists them)", name)
	}
	if err != nil {
		return err
	}
	out, err := json.Marshal(res)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, err = w.Write(append(out, '\n'))
	return err
}
