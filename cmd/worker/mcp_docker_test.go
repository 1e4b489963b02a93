package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandfleet/sandfleet/internal/mcp/mcptest"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/pkg/executor"
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
	exec := workertest.Sandbox(t, cfg)
	addr := testutil.FreeAddr(t)
	s := startServe(t, []string{"--embedded", "--listen", "127.0.0.1:-1", "--data-dir", t.TempDir(), "--slots", "2", "--id", "mcp", "--http", addr},
		&executor.Reaping{Executor: exec})
	defer s.Stop(t)

	// The API opens its client in the background.
	var cs *sdk.ClientSession
	err = testutil.Poll(t.Context(), 10*time.Second, 100*time.Millisecond, func(ctx context.Context) (err error) {
		c := sdk.NewClient(&sdk.Implementation{Name: "sandfleet-test", Version: "1"}, nil)
		cs, err = c.Connect(ctx, mcptest.HTTP("http://"+addr+"/mcp", ""), nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
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
