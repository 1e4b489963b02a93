package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mgclient "github.com/mark3labs/mcp-go/client"
	mgtransport "github.com/mark3labs/mcp-go/client/transport"
	mg "github.com/mark3labs/mcp-go/mcp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/internal/mcp"
	"github.com/sandfleet/sandfleet/internal/mcp/mcptest"
)

// mcpgo is github.com/mark3labs/mcp-go's client, on its defaults.
type mcpgo struct {
	c     *mgclient.Client
	init  *mg.InitializeResult
	heard heard
}

// connectMCPGo starts and initializes c as its README does: no protocol
// version, no option.
func connectMCPGo(t *testing.T, c *mgclient.Client) (*mcpgo, error) {
	t.Helper()
	a := &mcpgo{c: c}
	t.Cleanup(func() { _ = c.Close() })
	c.OnNotification(func(n mg.JSONRPCNotification) {
		if n.Method == "notifications/progress" {
			a.heard.add(n.Params.AdditionalFields["progressToken"])
		}
	})
	if err := c.Start(t.Context()); err != nil {
		return nil, err
	}
	req := mg.InitializeRequest{}
	req.Params.ClientInfo = mg.Implementation{Name: "interop", Version: "1"}
	init, err := c.Initialize(t.Context(), req)
	if err != nil {
		return nil, err
	}
	a.init = init
	return a, nil
}

func (a *mcpgo) protocol() string      { return a.c.ProtocolVersion() }
func (a *mcpgo) serverVersion() string { return a.init.ServerInfo.Version }
func (a *mcpgo) progress(tok string) int {
	return a.heard.count(tok)
}

func (a *mcpgo) tools(ctx context.Context) ([]string, bool, error) {
	res, err := a.c.ListTools(ctx, mg.ListToolsRequest{})
	if err != nil {
		return nil, false, err
	}
	var names []string
	schema := false
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
		if tl.Name == mcp.ToolRunCode {
			schema = tl.OutputSchema.Type == "object" || len(tl.RawOutputSchema) > 0
		}
	}
	return names, schema, nil
}

func (a *mcpgo) call(ctx context.Context, name string, args map[string]any, tok string) (*callResult, error) {
	req := mg.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = name, args
	if tok != "" {
		req.Params.Meta = &mg.Meta{ProgressToken: tok}
	}
	res, err := a.c.CallTool(ctx, req)
	if err != nil {
		return nil, err
	}
	out := &callResult{isError: res.IsError, structured: structured(res.StructuredContent)}
	for _, c := range res.Content {
		if tc, ok := mg.AsTextContent(c); ok {
			out.text += tc.Text
		}
		if img, ok := mg.AsImageContent(c); ok {
			out.images = append(out.images, img.MIMEType)
		}
	}
	return out, nil
}

// gosdk is the official Go SDK's client, on its defaults: it asks for the
// newest revision it speaks.
type gosdk struct {
	cs    *sdk.ClientSession
	heard heard
}

func connectGoSDK(t *testing.T, endpoint, token string) (*gosdk, error) {
	t.Helper()
	a := &gosdk{}
	c := sdk.NewClient(&sdk.Implementation{Name: "interop", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			a.heard.add(req.Params.ProgressToken)
		}})
	cs, err := c.Connect(t.Context(), mcptest.HTTP(endpoint, token), nil)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = cs.Close() })
	a.cs = cs
	return a, nil
}

func (a *gosdk) protocol() string        { return a.cs.InitializeResult().ProtocolVersion }
func (a *gosdk) serverVersion() string   { return a.cs.InitializeResult().ServerInfo.Version }
func (a *gosdk) progress(tok string) int { return a.heard.count(tok) }

func (a *gosdk) tools(ctx context.Context) ([]string, bool, error) {
	res, err := a.cs.ListTools(ctx, nil)
	if err != nil {
		return nil, false, err
	}
	var names []string
	schema := false
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
		if tl.Name == mcp.ToolRunCode {
			schema = tl.OutputSchema != nil
		}
	}
	return names, schema, nil
}

func (a *gosdk) call(ctx context.Context, name string, args map[string]any, tok string) (*callResult, error) {
	p := &sdk.CallToolParams{Name: name, Arguments: args}
	if tok != "" {
		p.SetProgressToken(tok)
	}
	res, err := a.cs.CallTool(ctx, p)
	if err != nil {
		return nil, err
	}
	out := &callResult{isError: res.IsError, text: mcptest.Text(res), structured: structured(res.StructuredContent)}
	for _, c := range res.Content {
		if img, ok := c.(*sdk.ImageContent); ok {
			out.images = append(out.images, img.MIMEType)
		}
	}
	return out, nil
}

// mcp-go on its defaults over Streamable HTTP: it opens with 2026-07-28's
// server/discover and settles on the newest revision the transport serves.
// Over HTTP it never sends notifications/cancelled: its cancel is dropping
// the request, which must cancel the job.
func TestMCPInteropMCPGoHTTP(t *testing.T) {
	t.Parallel()
	f := startInteropFleet(t, "interop-mg")
	bearer := mgtransport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + f.token})
	c, err := mgclient.NewStreamableHttpClient(f.base+"/mcp", bearer)
	if err != nil {
		t.Fatal(err)
	}
	a, err := connectMCPGo(t, c)
	if err != nil {
		t.Fatalf("initialize on mcp-go's defaults: %v", err)
	}
	if got := a.protocol(); got != mcp.HTTPVersions()[0] {
		t.Errorf("protocol %q, want the newest served, %s", got, mcp.HTTPVersions()[0])
	}
	if got := a.serverVersion(); got != cmdline.Version(version) {
		t.Errorf("serverInfo.version %q, want the build's %q", got, cmdline.Version(version))
	}
	scenario(t, f, a, true)
	cancelByContext(t, f, a, "mcp-go's dropped request")

	bad, err := mgclient.NewStreamableHttpClient(f.base+"/mcp", mgtransport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer sft_wrong"}))
	if err != nil {
		t.Fatal(err)
	}
	var authErr *mgtransport.AuthorizationRequiredError
	if _, err := connectMCPGo(t, bad); !errors.As(err, &authErr) {
		t.Errorf("a bad token: %v, want the client's 401 error", err)
	}
}

// The Go SDK's client on its defaults over Streamable HTTP: the same, and
// its cancel is an explicit notifications/cancelled. A request dropped by
// hand and a DELETE of the session while a call runs cancel their jobs
// too, and the DELETE is answered at once.
func TestMCPInteropGoSDKHTTP(t *testing.T) {
	t.Parallel()
	f := startInteropFleet(t, "interop-sdk")
	a, err := connectGoSDK(t, f.base+"/mcp", f.token)
	if err != nil {
		t.Fatalf("connect on the SDK's defaults: %v", err)
	}
	if got := a.protocol(); got != mcp.HTTPVersions()[0] {
		t.Errorf("protocol %q, want the newest served, %s", got, mcp.HTTPVersions()[0])
	}
	if got := a.serverVersion(); got != cmdline.Version(version) {
		t.Errorf("serverInfo.version %q, want the build's %q", got, cmdline.Version(version))
	}
	scenario(t, f, a, true)
	cancelByContext(t, f, a, "notifications/cancelled")

	// A tools/call POST whose client goes away before the answer.
	ctx, drop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		body := `{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"run_code","arguments":{"language":"python","code":` +
			quote(sleeper) + `}}}`
		res, err := rawMCP(ctx, f, http.MethodPost, a.cs.ID(), body)
		if err == nil {
			res.Body.Close()
		}
	}()
	id := f.runningJob(t)
	drop()
	<-done
	f.canceled(t, id, "a dropped POST")

	// DELETE of the session while a call runs.
	b, err := connectGoSDK(t, f.base+"/mcp", f.token)
	if err != nil {
		t.Fatal(err)
	}
	called := make(chan error, 1)
	go func() {
		_, err := b.call(t.Context(), "run_code", map[string]any{"language": "python", "code": sleeper}, "")
		called <- err
	}()
	id = f.runningJob(t)
	dctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	res, err := rawMCP(dctx, f, http.MethodDelete, b.cs.ID(), "")
	if err != nil || res.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE /mcp while a call runs: %v %v, want 204 at once", err, res)
	}
	res.Body.Close()
	f.canceled(t, id, "DELETE of the session")
	<-called

	if _, err := connectGoSDK(t, f.base+"/mcp", "sft_wrong"); err == nil {
		t.Error("a bad token connected")
	}
	if res, err := rawMCP(t.Context(), &interopFleet{base: f.base, token: "sft_wrong"}, http.MethodPost, "", "{}"); err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a bad token: %v %v, want 401", err, res)
	}
}

// rawMCP sends one request to /mcp as a client of revision 2025-11-25.
func rawMCP(ctx context.Context, f *interopFleet, method, session, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, f.base+"/mcp", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+f.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	return http.DefaultClient.Do(req)
}

// quote is s as a JSON string.
func quote(s string) string {
	data, _ := json.Marshal(s)
	return string(data)
}

// mcp-go on its defaults over stdio, starting `submit mcp` (built with the
// version a release sets) as an agent's config does, through the gateway.
// Its cancel is notifications/cancelled.
func TestMCPInteropMCPGoStdio(t *testing.T) {
	t.Parallel()
	f := startInteropFleet(t, "interop-stdio")
	bin := interopSubmit(t)
	env := append(os.Environ(), "SANDFLEET_URL="+f.base, "SANDFLEET_TOKEN="+f.token)
	c, err := mgclient.NewStdioMCPClient(bin, env, "mcp")
	if err != nil {
		t.Fatal(err)
	}
	a, err := connectMCPGo(t, c)
	if err != nil {
		t.Fatalf("initialize on mcp-go's defaults: %v", err)
	}
	if got := a.protocol(); !slices.Contains(sdk.SupportedProtocolVersions(), got) {
		t.Errorf("protocol %q: not one the SDK serves", got)
	}
	t.Logf("mcp-go over stdio settled on %s", a.protocol())
	if got := a.serverVersion(); got != interopVersion {
		t.Errorf("serverInfo.version %q, want the build's %q", got, interopVersion)
	}
	scenario(t, f, a, false)
	cancelByContext(t, f, a, "notifications/cancelled on stdin")

	// A bad token: submit mcp says so and exits; the client's initialize
	// fails rather than hanging.
	bad, err := mgclient.NewStdioMCPClient(bin, append(os.Environ(), "SANDFLEET_URL="+f.base, "SANDFLEET_TOKEN=sft_wrong"), "mcp")
	if err != nil {
		return // the process ended before the client could start: refused
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	t.Cleanup(func() { _ = bad.Close() })
	req := mg.InitializeRequest{}
	if _, err := bad.Initialize(ctx, req); err == nil || ctx.Err() != nil {
		t.Errorf("a bad token: initialize %v (ctx %v), want a prompt failure", err, ctx.Err())
	}
}

// interopVersion is what the interop tests' submit binary says it is.
const interopVersion = "v0.0.0-interop"

// interopSubmit builds cmd/submit once per test run, with -ldflags as
// `make build` sets the version, beside the worker binaries.
func interopSubmit(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the submit binary; skipped under -short")
	}
	binMu.Lock()
	defer binMu.Unlock()
	if path, ok := binByTags["submit"]; ok {
		return path
	}
	if binDir == "" {
		dir, err := os.MkdirTemp("", "sandfleet-worker-bin-")
		if err != nil {
			t.Fatal(err)
		}
		binDir = dir
	}
	path := filepath.Join(binDir, "submit")
	cmd := exec.Command("go", "build", "-ldflags", "-X main.version="+interopVersion, "-o", path, "../submit")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ../submit: %v\n%s", err, out)
	}
	binByTags["submit"] = path
	return path
}
