package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Caller is who calls a tool: over HTTP, the token the gateway
// authenticated (Name keeps a session to the token that opened it, Value
// is the gateway's own); over stdio, nil.
type Caller struct {
	Name  string
	Value any
	// BaseURL is the scheme and host the call came to
	// ("https://gw.example"), for the URLs a result gives; "": see
	// HeaderBaseURL.
	BaseURL string
}

// RunnerFor returns the Runner a caller's jobs run on.
type RunnerFor func(c *Caller) (Runner, error)

// Server is the MCP server of the tools.
type Server struct {
	opts   Options
	runner RunnerFor
	srv    *sdk.Server
	calls  map[string]call // by tool name: Call's
	// inflight are the calls running over HTTP, for the transport to end.
	inflight inflight
}

// NewServer returns a server whose tools run their jobs on runner(caller).
func NewServer(opts Options, runner RunnerFor) (*Server, error) {
	opts.SetDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Server{opts: opts, runner: runner, calls: map[string]call{}}
	s.srv = sdk.NewServer(&sdk.Implementation{Name: "sandfleet", Version: opts.Version}, &sdk.ServerOptions{
		Instructions: "sandfleet runs code in isolated, single-use sandboxes. Use run_code to run a program and read its output.",
		Logger:       opts.Logger,
	})
	// The registry: a tool is its definition and its handler. A tool of
	// sessions is one more line here, with its Def in Definitions.
	handlers := map[string]func(d Def){
		ToolRunCode:       func(d Def) { addTool(s, d, s.runCode) },
		ToolCreateSession: func(d Def) { addTool(s, d, s.createSession) },
		ToolExec:          func(d Def) { addTool(s, d, s.exec) },
		ToolReadFile:      func(d Def) { addTool(s, d, s.readFile) },
		ToolWriteFile:     func(d Def) { addTool(s, d, s.writeFile) },
		ToolListFiles:     func(d Def) { addTool(s, d, s.listFiles) },
		ToolCloseSession:  func(d Def) { addTool(s, d, s.closeSession) },
		ToolExposePort:    func(d Def) { addTool(s, d, s.exposePort) },
	}
	for _, d := range opts.Definitions() {
		add, ok := handlers[d.Name]
		if !ok {
			return nil, errors.New("mcp: tool " + d.Name + " has no handler")
		}
		add(d)
	}
	s.addArtifacts()
	return s, nil
}

// addTool registers a tool whose arguments the SDK validates against
// d.InputSchema and decodes into In: arguments it refuses are a result
// with isError (the model may correct them), not a protocol error.
func addTool[In any](s *Server, d Def, h func(ctx context.Context, req *sdk.CallToolRequest, in In) (*sdk.CallToolResult, error)) {
	t := &sdk.Tool{Name: d.Name, Description: d.Description, InputSchema: d.InputSchema}
	if d.OutputSchema != nil {
		t.OutputSchema = d.OutputSchema // a nil *Schema in the interface is not "none"
	}
	sdk.AddTool(s.srv, t, func(ctx context.Context, req *sdk.CallToolRequest, in In) (*sdk.CallToolResult, any, error) {
		ctx, done := s.inflight.start(ctx, req)
		defer done()
		res, err := h(ctx, req, in)
		return res, nil, err
	})
	c, err := callOf(d, h)
	if err != nil {
		panic(err) // the SDK's AddTool has resolved the same schema already
	}
	s.calls[d.Name] = c
}

// progress tells the client, every Options.Progress, that a call asking
// for progress (a progressToken) still runs: clients end calls that stay
// silent too long. stop ends it and waits for it.
func (s *Server) progress(ctx context.Context, req *sdk.CallToolRequest, total time.Duration) (stop func()) {
	tok := req.Params.GetProgressToken()
	if tok == nil || req.Session == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		tick := time.NewTicker(s.opts.Progress)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// Progress must grow with each notification: the seconds
			// waited do, the bound of the wait is its total.
			el := time.Since(start)
			_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: tok,
				Progress: el.Seconds(), Total: total.Seconds(), Message: fmt.Sprintf("the job has been queued or running for %s", el.Round(time.Second))})
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// callerOf is the Caller the HTTP handler put on the request's token.
func callerOf(extra *sdk.RequestExtra) *Caller {
	if extra == nil || extra.TokenInfo == nil {
		return nil
	}
	c, _ := extra.TokenInfo.Extra[callerKey].(*Caller)
	return c
}

const callerKey = "sandfleet.caller"

// MaxCall is the longest a tool call may take: the longest timeout and
// the wait beyond it.
func (s *Server) MaxCall() time.Duration { return s.opts.MaxTimeout + s.opts.Wait }

// Definitions are the server's tools.
func (s *Server) Definitions() []Def { return s.opts.Definitions() }

// ServeStdio serves one client on in and out (a process's stdin and
// stdout) until it leaves or ctx ends.
func (s *Server) ServeStdio(ctx context.Context, in io.ReadCloser, out io.WriteCloser) error {
	err := s.srv.Run(ctx, &sdk.IOTransport{Reader: in, Writer: out})
	if errors.Is(err, io.EOF) || ctx.Err() != nil {
		return nil
	}
	return err
}
