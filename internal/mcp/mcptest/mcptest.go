// Package mcptest drives a sandfleet MCP server with the Go SDK's own
// client, the way an agent does, for the tests of each transport.
package mcptest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Programs are what Exercise runs, in the language of the fleet under test
// (the fake executor's script, or real Python).
type Programs struct {
	Language string
	// Prints prints 42 on stdout and exits 0.
	Prints string
	// Fails prints boom on stderr and exits 3.
	Fails string
	// Floods writes far more than MaxOutput bytes to stdout.
	Floods string
}

// Fake are the fake executor's programs (internal/testutil/fakeexec).
var Fake = Programs{Language: "python", Prints: "print 42", Fails: "eprint boom\nexit 3", Floods: "flood 200000 x"}

// Python are real Python's.
var Python = Programs{Language: "python", Prints: "print(6*7)",
	Fails:  "import sys\nprint('boom', file=sys.stderr)\nsys.exit(3)",
	Floods: "print('x' * 200000)"}

// Connect opens a client session over t.
func Connect(t testing.TB, tr sdk.Transport) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "sandfleet-test", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), tr, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// HTTP is a Streamable HTTP transport to endpoint with a bearer token
// ("" for none).
func HTTP(endpoint, token string) *sdk.StreamableClientTransport {
	return &sdk.StreamableClientTransport{Endpoint: endpoint, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearer{token: token, rt: http.DefaultTransport}}}
}

type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.rt.RoundTrip(r)
}

// Text is the text of a result's text blocks.
func Text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// RunCode calls run_code and fails the test on a protocol error.
func RunCode(t testing.TB, ctx context.Context, cs *sdk.ClientSession, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_code", Arguments: args})
	if err != nil {
		t.Fatalf("run_code %v: %v", args, err)
	}
	return res
}

// Exercise is what every transport must do: initialize (Connect did),
// list the tools, run a program that succeeds, one that fails (isError,
// its stderr said), one whose output is over maxOutput (bounded, and the
// result says so), a call with arguments the schema refuses (isError), and
// a call of no tool (a protocol error).
func Exercise(t *testing.T, cs *sdk.ClientSession, p Programs, maxOutput int) {
	t.Helper()
	ctx := t.Context()
	if info := cs.InitializeResult(); info == nil || info.ServerInfo == nil || info.ServerInfo.Name != "sandfleet" {
		t.Errorf("initialize: %+v", info)
	}

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	// run_code, and on a server with sessions their tools beside it.
	var desc string
	for _, tl := range tools.Tools {
		if tl.Name == "run_code" {
			desc = tl.Description
		}
	}
	if desc == "" {
		t.Fatalf("tools/list has no run_code: %d tools", len(tools.Tools))
	}
	for _, want := range []string{"timeout 30s", "no network", "512 MiB of memory", fmt.Sprintf("at most %d bytes", maxOutput)} {
		if !strings.Contains(desc, want) {
			t.Errorf("run_code's description does not say %q: %s", want, desc)
		}
	}

	res := RunCode(t, ctx, cs, map[string]any{"language": p.Language, "code": p.Prints})
	if txt := Text(res); res.IsError || !strings.Contains(txt, "status: succeeded") || !strings.Contains(txt, "42\n") {
		t.Errorf("a program that prints 42: isError %v, text %q", res.IsError, txt)
	}

	res = RunCode(t, ctx, cs, map[string]any{"language": p.Language, "code": p.Fails})
	if txt := Text(res); !res.IsError || !strings.Contains(txt, "status: failed (exit code 3)") || !strings.Contains(txt, "boom") {
		t.Errorf("a failing program: isError %v, text %q", res.IsError, txt)
	}

	res = RunCode(t, ctx, cs, map[string]any{"language": p.Language, "code": p.Floods})
	txt := Text(res)
	if len(txt) > maxOutput || !strings.Contains(txt, "bytes left out: the output is over the result's bound") ||
		!strings.Contains(txt, "xxxxxxxx") || res.IsError {
		t.Errorf("a flood: isError %v, %d bytes of text (bound %d): %.300q", res.IsError, len(txt), maxOutput, txt)
	}

	res = RunCode(t, ctx, cs, map[string]any{"language": "cobol", "code": p.Prints})
	if txt := Text(res); !res.IsError || !strings.Contains(txt, "language") {
		t.Errorf("a language the schema does not list: isError %v, text %q", res.IsError, txt)
	}

	_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "no_such_tool", Arguments: map[string]any{}})
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) || werr.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("a call of no tool: %v, want a protocol error %d", err, jsonrpc.CodeInvalidParams)
	}
}

// Call calls a tool and fails t on a protocol error.
func Call(t testing.TB, ctx context.Context, cs *sdk.ClientSession, name string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}
