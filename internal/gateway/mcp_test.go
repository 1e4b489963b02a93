package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/mcp"
	"github.com/sandfleet/sandfleet/internal/mcp/mcptest"
	"github.com/sandfleet/sandfleet/internal/testutil"
)

const mcpMaxOutput = 4096

// An agent's MCP client on /mcp: the whole exchange, with the gateway's
// tokens.
func TestMCPOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, options{cfg: gateway.Config{MCP: mcp.Options{MaxOutput: mcpMaxOutput}}})
	cs := mcptest.Connect(t, mcptest.HTTP(b.url+"/mcp", b.alice))
	mcptest.Exercise(t, cs, mcptest.Fake, mcpMaxOutput)

	// The job ran as alice's, as POST /v1/jobs would have it.
	res := mcptest.RunCode(t, t.Context(), cs, map[string]any{"language": "python", "code": "print hi"})
	id := jobID(t, mcptest.Text(res))
	stored, err := b.client.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Labels[gateway.TokenLabel] != "alice" {
		t.Errorf("labels %v: want the token alice", stored.Labels)
	}
}

// jobID reads the job's ID off a result's first line.
func jobID(t *testing.T, text string) string {
	t.Helper()
	first, _, _ := strings.Cut(text, "\n")
	_, id, ok := strings.Cut(first, ", job ")
	if !ok {
		t.Fatalf("no job ID in %q", text)
	}
	return id
}

// A timeout is the program's failure; images come back as image content,
// other files as links.
func TestMCPTimeoutAndArtifacts(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	cs := mcptest.Connect(t, mcptest.HTTP(b.url+"/mcp", b.alice))
	ctx := t.Context()

	res := mcptest.RunCode(t, ctx, cs, map[string]any{"language": "python", "code": "timeout", "timeout": 2})
	if txt := mcptest.Text(res); !res.IsError || !strings.Contains(txt, "status: timeout") || !strings.Contains(txt, "past its timeout") {
		t.Errorf("timeout: isError %v, %q", res.IsError, txt)
	}

	gif := "GIF89a\x01\x00\x01\x00" // what http.DetectContentType takes for a GIF
	res = mcptest.RunCode(t, ctx, cs, map[string]any{"language": "python", "code": "write notes.txt hi",
		"files": map[string]string{"plot.gif": gif, "fake.png": "not a PNG"}, "outputs": []string{"*.gif", "*.png", "*.txt"}})
	if res.IsError {
		t.Fatalf("artifacts: %q", mcptest.Text(res))
	}
	var images, links []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.ImageContent:
			if c.MIMEType != "image/gif" || string(c.Data) != gif {
				t.Errorf("image %s %q", c.MIMEType, c.Data)
			}
			images = append(images, c.MIMEType)
		case *sdk.ResourceLink:
			if !strings.HasPrefix(c.URI, "sandfleet:///jobs/") || !strings.HasSuffix(c.URI, "/artifacts/"+c.Name) || c.Size == nil {
				t.Errorf("link %+v", c)
			}
			links = append(links, c.Name)
		}
	}
	// A file named .png that is no PNG is linked, not shown as an image.
	if len(images) != 1 || !reflect.DeepEqual(links, []string{"fake.png", "notes.txt"}) {
		t.Errorf("images %v, links %v; text %q", images, links, mcptest.Text(res))
	}

	// A link is readable: resources/read gives the file.
	id := jobID(t, mcptest.Text(res))
	read, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: mcp.ArtifactURI(id, "notes.txt")})
	if err != nil || len(read.Contents) != 1 || read.Contents[0].Text != "hi\n" {
		t.Errorf("read notes.txt: %v %+v", err, read)
	}
	// Not a file the job kept, nor another scheme: not found.
	for _, uri := range []string{mcp.ArtifactURI(id, "secret.txt"), "file:///etc/passwd"} {
		if _, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: uri}); err == nil {
			t.Errorf("read %s: no error", uri)
		}
	}
}

// A call the client gives up on cancels its job: it does not run on for
// nobody.
func TestMCPCancelCancelsTheJob(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	cs := mcptest.Connect(t, mcptest.HTTP(b.url+"/mcp", b.alice))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_code", Arguments: map[string]any{"language": "python", "code": "block"}})
		done <- err
	}()
	testutil.Eventually(t, 10*time.Second, "the job runs", func() bool { return b.exec.Running() == 1 })
	cancel()
	if err := <-done; err == nil {
		t.Error("a canceled call returned no error")
	}
	testutil.Eventually(t, 10*time.Second, "the job is canceled", func() bool { return b.exec.Running() == 0 })
}

// /mcp is behind the API's tokens: none is 401 as JSON, and a session
// belongs to the token that opened it.
func TestMCPNeedsItsToken(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	b := setup(t, options{})
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`
	accept := []string{"Content-Type", "application/json", "Accept", "application/json, text/event-stream"}
	for _, c := range []apiCase{
		{name: "no token", method: "POST", path: "/mcp", body: initialize, header: accept, status: 401, code: gateway.CodeUnauthorized},
		{name: "a wrong token", method: "POST", path: "/mcp", token: "sft_nope", body: initialize, header: accept, status: 401, code: gateway.CodeUnauthorized},
		{name: "tools without a token", method: "GET", path: "/v1/tools", status: 401, code: gateway.CodeUnauthorized},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, b, doc) })
	}

	r := b.do(t, "POST", "/mcp", b.alice, []byte(initialize), accept...)
	sid := r.header.Get("Mcp-Session-Id")
	if r.status != 200 || sid == "" {
		t.Fatalf("alice's initialize: %d %q %s", r.status, sid, r.body)
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	hdr := append([]string{"Mcp-Session-Id", sid, "Mcp-Protocol-Version", "2025-06-18"}, accept...)
	if r := b.do(t, "POST", "/mcp", b.bob, []byte(list), hdr...); r.status != http.StatusForbidden {
		t.Errorf("bob on alice's session: %d %s, want 403", r.status, r.body)
	}
	if r := b.do(t, "POST", "/mcp", b.alice, []byte(list), hdr...); r.status != 200 || !strings.Contains(string(r.body), "run_code") {
		t.Errorf("alice on her session: %d %s", r.status, r.body)
	}
}

// GET /v1/tools gives the tools of /mcp in each format, from the same
// definitions: the schema is tools/list's, and it is valid JSON Schema.
func TestToolsFormats(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	b := setup(t, options{cfg: gateway.Config{MCP: mcp.Options{MaxOutput: mcpMaxOutput}}})
	cs := mcptest.Connect(t, mcptest.HTTP(b.url+"/mcp", b.alice))
	listed, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := listed.Tools[0]
	wantSchema, _ := json.Marshal(want.InputSchema)

	schemaOf := map[string]func(tool map[string]any) (name, desc string, schema any){
		"openai": func(tool map[string]any) (string, string, any) {
			if tool["type"] != "function" {
				t.Errorf("openai tool type %v", tool["type"])
			}
			f, _ := tool["function"].(map[string]any)
			n, _ := f["name"].(string)
			d, _ := f["description"].(string)
			return n, d, f["parameters"]
		},
		"anthropic": func(tool map[string]any) (string, string, any) {
			n, _ := tool["name"].(string)
			d, _ := tool["description"].(string)
			return n, d, tool["input_schema"]
		},
		"mcp": func(tool map[string]any) (string, string, any) {
			n, _ := tool["name"].(string)
			d, _ := tool["description"].(string)
			return n, d, tool["inputSchema"]
		},
	}
	for format, get := range schemaOf {
		t.Run(format, func(t *testing.T) {
			r := apiCase{method: "GET", path: "/v1/tools?format=" + format, token: b.bob, status: 200}.run(t, b, doc)
			var body struct {
				Format string           `json:"format"`
				Tools  []map[string]any `json:"tools"`
			}
			r.decode(t, &body)
			if body.Format != format || len(body.Tools) != 1 {
				t.Fatalf("%s", r.body)
			}
			name, desc, schema := get(body.Tools[0])
			got, _ := json.Marshal(schema)
			if name != want.Name || desc != want.Description || string(got) != string(wantSchema) {
				t.Errorf("%s: %s %q %s\nwant %s %q %s", format, name, desc, got, want.Name, want.Description, wantSchema)
			}
			var s jsonschema.Schema
			if err := json.Unmarshal(got, &s); err != nil {
				t.Fatal(err)
			}
			rs, err := s.Resolve(nil)
			if err != nil {
				t.Fatalf("not a valid JSON Schema: %v", err)
			}
			if err := rs.Validate(map[string]any{"language": "python", "code": "print(1)", "timeout": 5.0}); err != nil {
				t.Errorf("a good call refused: %v", err)
			}
			if err := rs.Validate(map[string]any{"code": "print(1)"}); err == nil {
				t.Error("a call without language accepted")
			}
		})
	}
	apiCase{name: "bad format", method: "GET", path: "/v1/tools?format=gemini", token: b.alice, status: 400,
		code: gateway.CodeInvalidRequest, docRefuses: true}.run(t, b, doc)
}

// An open gateway's /mcp refuses what its API refuses: a page of another
// site and a rebound name; an agent's client, no browser, is served.
func TestMCPOpenGatewayRefusesOtherSites(t *testing.T) {
	t.Parallel()
	b := setup(t, options{open: true})
	initialize := []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`)
	accept := []string{"Content-Type", "application/json", "Accept", "application/json, text/event-stream"}
	for _, tc := range []struct {
		name   string
		hdr    []string
		status int
	}{
		{"a page of another site", []string{"Origin", "http://evil.example"}, 403},
		{"a rebound name", []string{"Host", "rebind.example:8080"}, 403},
		{"an agent's client", nil, 200},
	} {
		r := b.do(t, "POST", "/mcp", "", initialize, append(tc.hdr, accept...)...)
		if r.status != tc.status || (tc.status == 403 && r.errorCode() != gateway.CodeForbidden) {
			t.Errorf("%s: %d %s, want %d", tc.name, r.status, r.body, tc.status)
		}
	}
	cs := mcptest.Connect(t, mcptest.HTTP(b.url+"/mcp", ""))
	res := mcptest.RunCode(t, t.Context(), cs, map[string]any{"language": "python", "code": "print open"})
	if txt := mcptest.Text(res); res.IsError || !strings.Contains(txt, "open\n") {
		t.Errorf("isError %v: %q", res.IsError, txt)
	}
}

// A long call that asks for progress hears that its job still runs, so a
// client's own timeout does not end it.
func TestMCPProgressOfALongCall(t *testing.T) {
	t.Parallel()
	b := setup(t, options{cfg: gateway.Config{MCP: mcp.Options{Progress: 100 * time.Millisecond}}})
	var mu sync.Mutex
	var heard []*sdk.ProgressNotificationParams
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			heard = append(heard, req.Params)
		}})
	cs, err := c.Connect(t.Context(), mcptest.HTTP(b.url+"/mcp", b.alice), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	params := &sdk.CallToolParams{Name: "run_code", Arguments: map[string]any{"language": "python", "code": "sleep 1s\nprint done"}}
	params.SetProgressToken("call-1")
	res, err := cs.CallTool(t.Context(), params)
	if err != nil || res.IsError || !strings.Contains(mcptest.Text(res), "done") {
		t.Fatalf("%v %+v", err, res)
	}
	testutil.Eventually(t, 5*time.Second, "progress heard", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(heard) >= 2
	})
	mu.Lock()
	defer mu.Unlock()
	for i, p := range heard {
		if p.ProgressToken != "call-1" || (i > 0 && p.Progress <= heard[i-1].Progress) || p.Total <= 0 {
			t.Errorf("progress %d: %+v", i, p)
		}
	}
}

// A tool call waits in one of the gateway's waiting slots, as a long poll
// does: a token at its share is told so, as a result the model reads.
func TestMCPCallsHoldAWaitingSlot(t *testing.T) {
	t.Parallel()
	b := setup(t, options{cfg: gateway.Config{MaxWaitingPerToken: 1}})
	cs := mcptest.Connect(t, mcptest.HTTP(b.url+"/mcp", b.alice))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_code", Arguments: map[string]any{"language": "python", "code": "block"}})
		done <- err
	}()
	defer func() {
		cancel()
		<-done
	}()
	// The slot is taken before the job is queued: a running job holds it.
	testutil.Eventually(t, 10*time.Second, "the first call's job runs", func() bool { return b.exec.Running() == 1 })
	res := mcptest.RunCode(t, t.Context(), cs, map[string]any{"language": "python", "code": "print second"})
	if txt := mcptest.Text(res); !res.IsError || !strings.Contains(txt, string(gateway.CodeTooManyRequests)) {
		t.Errorf("a second call past the token's share: isError %v, %q", res.IsError, txt)
	}
	// Another token has its own share.
	other := mcptest.Connect(t, mcptest.HTTP(b.url+"/mcp", b.bob))
	if res := mcptest.RunCode(t, t.Context(), other, map[string]any{"language": "python", "code": "print bob"}); res.IsError {
		t.Errorf("bob's call: %q", mcptest.Text(res))
	}
}

// A model's tool call, in OpenAI's shape (arguments a JSON string) and in
// Anthropic's (input an object), built from each format's definition,
// runs through POST /v1/tools/{name} as the same job /mcp's tools/call
// runs: the same program, the same answer but for the job's ID. A
// failing program is a result with isError, not an HTTP error; arguments
// the schema refuses too; an unknown tool is a 404.
func TestToolCallRoundTrip(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	b := setup(t, options{cfg: gateway.Config{MCP: mcp.Options{MaxOutput: mcpMaxOutput}}})
	cs := mcptest.Connect(t, mcptest.HTTP(b.url+"/mcp", b.alice))
	viaMCP := mcptest.Text(mcptest.RunCode(t, t.Context(), cs, map[string]any{"language": "python", "code": mcptest.Fake.Prints}))

	// The model's calls, as each API hands them to the caller.
	args, _ := json.Marshal(map[string]any{"language": "python", "code": mcptest.Fake.Prints})
	openAICall := map[string]any{"id": "call_1", "type": "function",
		"function": map[string]any{"name": mcp.ToolRunCode, "arguments": string(args)}}
	anthropicCall := map[string]any{"type": "tool_use", "id": "toolu_1", "name": mcp.ToolRunCode,
		"input": map[string]any{"language": "python", "code": mcptest.Fake.Prints}}
	run := func(name, body string) (sdk.CallToolResult, string) {
		t.Helper()
		r := apiCase{method: "POST", path: "/v1/tools/" + name, token: b.alice, body: body, status: 200}.run(t, b, doc)
		var res sdk.CallToolResult
		if err := json.Unmarshal(r.body, &res); err != nil {
			t.Fatalf("%v: %s", err, r.body)
		}
		return res, mcptest.Text(&res)
	}
	fn := openAICall["function"].(map[string]any)
	fromOpenAI, textOpenAI := run(fn["name"].(string), fn["arguments"].(string))
	input, _ := json.Marshal(anthropicCall["input"])
	fromAnthropic, textAnthropic := run(anthropicCall["name"].(string), string(input))

	// Equal but for the first line's time and job ID, which each run has
	// its own of: its status stays.
	strip := func(text string) string {
		first, rest, _ := strings.Cut(text, "\n")
		status, _, _ := strings.Cut(first, " in ")
		return status + "\n" + rest
	}
	if fromOpenAI.IsError || fromAnthropic.IsError || !strings.Contains(textOpenAI, "42") ||
		strip(textOpenAI) != strip(textAnthropic) || strip(textOpenAI) != strip(viaMCP) {
		t.Errorf("openai %v %q\nanthropic %v %q\nmcp %q", fromOpenAI.IsError, textOpenAI, fromAnthropic.IsError, textAnthropic, viaMCP)
	}
	for _, text := range []string{textOpenAI, textAnthropic} {
		stored, err := b.client.Get(t.Context(), jobID(t, text))
		if err != nil || stored.Labels[gateway.TokenLabel] != "alice" {
			t.Errorf("the call's job: %v, %+v: want alice's", err, stored)
		}
	}

	failing, _ := json.Marshal(map[string]any{"language": "python", "code": mcptest.Fake.Fails})
	if res, text := run(mcp.ToolRunCode, string(failing)); !res.IsError || !strings.Contains(text, "boom") {
		t.Errorf("a failing program: %v %q, want isError with its stderr", res.IsError, text)
	}
	if res, text := run(mcp.ToolRunCode, `{"code":"print 1"}`); !res.IsError || !strings.Contains(text, "language") {
		t.Errorf("no language: %v %q, want isError naming it", res.IsError, text)
	}
	apiCase{name: "unknown tool", method: "POST", path: "/v1/tools/format_disk", token: b.alice, body: `{}`,
		status: 404, code: gateway.CodeNotFound}.run(t, b, doc)
	apiCase{name: "not JSON", method: "POST", path: "/v1/tools/run_code", token: b.alice, body: `{"code":`,
		status: 400, code: gateway.CodeInvalidJSON, docRefuses: true}.run(t, b, doc)
	apiCase{name: "no token", method: "POST", path: "/v1/tools/run_code", body: `{}`,
		status: 401, code: gateway.CodeUnauthorized}.run(t, b, doc)
}

// /llms.txt is the repository's docs/llms.txt, open like /openapi.yaml,
// and every route it names is one the gateway serves.
func TestLLMsTxt(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	b := setup(t, options{})
	want, err := os.ReadFile(filepath.Join("..", "..", "docs", "llms.txt"))
	if err != nil {
		t.Fatal(err)
	}
	r := apiCase{method: "GET", path: "/llms.txt", status: 200}.run(t, b, doc)
	if string(r.body) != string(want) || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Errorf("GET /llms.txt: %s, %d bytes; want docs/llms.txt's %d", r.header.Get("Content-Type"), len(r.body), len(want))
	}
	for _, m := range regexp.MustCompile(`\]\((/[^)?]*)`).FindAllStringSubmatch(string(want), -1) {
		path := strings.NewReplacer("{id}", "x", "{name}", "run_code", "{path}", "f").Replace(m[1])
		res := b.do(t, "GET", path, b.alice, nil)
		if res.errorCode() == gateway.CodeNotFound && strings.Contains(string(res.body), "route") {
			t.Errorf("llms.txt names %s, which no route serves: %s", m[1], res.body)
		}
	}
}
