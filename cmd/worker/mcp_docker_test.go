package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/mcp/mcptest"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
)

// pngProgram writes a real 1x1 PNG with the standard library, as a
// plotting library would write a figure.
const pngProgram = `import struct, zlib
def chunk(kind, data):
    c = struct.pack(">I", len(data)) + kind + data
    return c + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)) \
    + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b"")
open("figure.png", "wb").write(png)
print("drew it")
`

// An agent's MCP client on worker --embedded's /mcp, running real Python
// in the real sandbox: the whole exchange, a timeout, and a figure that
// comes back as an image.
func TestMCPOnDocker(t *testing.T) {
	t.Parallel()
	cfg, err := executorConfig(&options{id: "mcp"})
	if err != nil {
		t.Fatal(err)
	}
	w := startAPIWorker(t, &executor.Service{Executor: workertest.Sandbox(t, cfg)}, "mcp", "--slots", "2")

	cs := mcpConnect(t, w.addr, nil)
	mcptest.Exercise(t, cs, mcptest.Python, 32<<10)

	ctx := t.Context()
	res := mcptest.RunCode(t, ctx, cs, map[string]any{"language": "python", "code": "import time\ntime.sleep(60)", "timeout": 1})
	if txt := mcptest.Text(res); !res.IsError || !strings.Contains(txt, "status: timeout") {
		t.Errorf("timeout: isError %v, %q", res.IsError, txt)
	}

	res = mcptest.RunCode(t, ctx, cs, map[string]any{"language": "python", "code": pngProgram, "outputs": []string{"*.png"}})
	var png *sdk.ImageContent
	for _, c := range res.Content {
		if img, ok := c.(*sdk.ImageContent); ok {
			png = img
		}
	}
	if txt := mcptest.Text(res); res.IsError || png == nil || png.MIMEType != "image/png" || !bytes.HasPrefix(png.Data, []byte("\x89PNG\r\n\x1a\n")) ||
		!strings.Contains(txt, "drew it") || !strings.Contains(txt, "figure.png") {
		t.Errorf("a figure: isError %v, image %v, text %q", res.IsError, png != nil, txt)
	}
}

// A model's session through MCP on real Docker: state kept across cells,
// a file written by one tool read by a command, a failing command an
// isError result, the session closed.
func TestMCPSessionOnDocker(t *testing.T) {
	t.Parallel()
	cfg, err := executorConfig(&options{id: "mcp-s"})
	if err != nil {
		t.Fatal(err)
	}
	w := startAPIWorker(t, &executor.Service{Executor: workertest.Sandbox(t, cfg)}, "mcp-s", "--slots", "1")
	var mu sync.Mutex
	var heard []*sdk.ProgressNotificationParams
	cs := mcpConnect(t, w.addr, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			heard = append(heard, req.Params)
		}})
	ctx := t.Context()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, " "); got != "close_session create_session exec expose_port list_files read_file run_code write_file" {
		t.Fatalf("tools: %s", got)
	}
	var id string
	testutil.Eventually(t, 30*time.Second, "a session created", func() bool {
		res := mcptest.Call(t, ctx, cs, "create_session", map[string]any{})
		txt := mcptest.Text(res)
		id, _, _ = strings.Cut(strings.TrimPrefix(txt, "session: "), "\n")
		return !res.IsError && strings.HasPrefix(txt, "session: ")
	})
	cell := func(code string) (*sdk.CallToolResult, string) {
		res := mcptest.Call(t, ctx, cs, "run_code", map[string]any{"language": "python", "code": code, "session": id})
		return res, mcptest.Text(res)
	}
	if res, txt := cell("n = 6"); res.IsError {
		t.Fatalf("first cell: %s", txt)
	}
	if res, txt := cell("print('side')\nn * 7"); res.IsError || !strings.Contains(txt, "value: 42") || !strings.Contains(txt, "side") {
		t.Fatalf("second cell: %s", txt)
	}
	if res, txt := cell("1/0"); !res.IsError || !strings.Contains(txt, "ZeroDivisionError") {
		t.Fatalf("a raising cell: isError %v, %s", res.IsError, txt)
	}
	if res := mcptest.Call(t, ctx, cs, "write_file", map[string]any{"session": id, "path": "notes/a.txt", "content": "from the model\n"}); res.IsError {
		t.Fatalf("write_file: %s", mcptest.Text(res))
	}
	if res := mcptest.Call(t, ctx, cs, "exec", map[string]any{"session": id, "command": "cat notes/a.txt; ls"}); res.IsError ||
		!strings.Contains(mcptest.Text(res), "from the model") || !strings.Contains(mcptest.Text(res), "exit code: 0") {
		t.Fatalf("exec: %s", mcptest.Text(res))
	}
	if res := mcptest.Call(t, ctx, cs, "exec", map[string]any{"session": id, "command": "echo nope >&2; exit 4"}); !res.IsError ||
		!strings.Contains(mcptest.Text(res), "exit code: 4") {
		t.Fatalf("a failing command: isError %v, %s", res.IsError, mcptest.Text(res))
	}
	if res := mcptest.Call(t, ctx, cs, "read_file", map[string]any{"session": id, "path": "notes/a.txt"}); mcptest.Text(res) != "from the model\n" {
		t.Fatalf("read_file: %q", mcptest.Text(res))
	}
	if res := mcptest.Call(t, ctx, cs, "list_files", map[string]any{"session": id}); !strings.Contains(mcptest.Text(res), "dir\tnotes") {
		t.Fatalf("list_files: %q", mcptest.Text(res))
	}
	// A command longer than the server's progress period (10 s) that asks
	// for progress hears that it still runs, as run_code's jobs do.
	params := &sdk.CallToolParams{Name: "exec", Arguments: map[string]any{"session": id, "command": "sleep 12; echo slept"}}
	params.SetProgressToken("exec-1")
	if res, err := cs.CallTool(ctx, params); err != nil || res.IsError || !strings.Contains(mcptest.Text(res), "slept") {
		t.Fatalf("a long command: %v %+v", err, res)
	}
	testutil.Eventually(t, 10*time.Second, "the long command's progress heard", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(heard) >= 1 && heard[0].ProgressToken == "exec-1"
	})
	// A server the model starts, exposed: the preview URL the tool gives
	// serves its files to a request with no other credentials.
	if res := mcptest.Call(t, ctx, cs, "exec", map[string]any{"session": id,
		"command": "cd notes && (python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &)"}); res.IsError {
		t.Fatalf("start a server: %s", mcptest.Text(res))
	}
	res := mcptest.Call(t, ctx, cs, "expose_port", map[string]any{"session": id, "port": 8000, "wait": 30})
	_, preview, _ := strings.Cut(mcptest.Text(res), "preview url: ")
	preview, _, _ = strings.Cut(preview, "\n")
	if res.IsError || !strings.Contains(preview, "/v1/sessions/"+id+"/ports/8000/?sandfleet_preview=") {
		t.Fatalf("expose_port: %s", mcptest.Text(res))
	}
	if r, err := http.Get(strings.Replace(preview, "/?", "/a.txt?", 1)); err != nil {
		t.Fatalf("the preview URL: %v", err)
	} else if b, _ := io.ReadAll(r.Body); r.Body.Close() != nil || r.StatusCode != 200 || string(b) != "from the model\n" {
		t.Errorf("the preview URL: %d %q, want the file", r.StatusCode, b)
	}
	mcptest.Call(t, ctx, cs, "close_session", map[string]any{"session": id})
	if res := mcptest.Call(t, ctx, cs, "exec", map[string]any{"session": id, "command": "true"}); !res.IsError || !strings.Contains(mcptest.Text(res), "gone") {
		t.Fatalf("exec after close: %s", mcptest.Text(res))
	}
}

// mcpConnect connects an MCP client to the API's /mcp at addr, once it
// answers: the API opens its client in the background. It is closed when
// the test ends.
func mcpConnect(t *testing.T, addr string, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	var cs *sdk.ClientSession
	err := testutil.Poll(t.Context(), 10*time.Second, 100*time.Millisecond, func(ctx context.Context) (err error) {
		c := sdk.NewClient(&sdk.Implementation{Name: "sandfleet-test", Version: "1"}, opts)
		cs, err = c.Connect(ctx, mcptest.HTTP("http://"+addr+"/mcp", ""), nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}
