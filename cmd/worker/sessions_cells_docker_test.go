package main

import (
	"bytes"
	"encoding/base64"
	"image/png"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// figureCell shows a 48×32 PNG by the display protocol the launcher
// reads (a file in its display directory), without matplotlib, which
// only the data image has.
const figureCell = `import os, struct, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
w, h = 48, 32
rows = b"".join(b"\0" + bytes([20, 90, 200]) * w for _ in range(h))
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
os.makedirs("/tmp/.sandfleet-display", exist_ok=True)
open("/tmp/.sandfleet-display/000001.png", "wb").write(png)
"drawn"`

// A real session's cells read back over HTTP, as a worker keeps them: in
// order, each with its code and value, the raising one with its error,
// the figure as the PNG the cell wrote; past 20 cells the oldest are
// counted as dropped; once the session is deleted they are still there,
// and a session that ran none has none kept.
func TestSessionCellsDocker(t *testing.T) {
	t.Parallel()
	w := startAPIWorker(t, pythonSandbox(t, runID("cells")), "c1", "--slots", "1", "--pool", "0", "--sessions", "2")
	w.sessionsUp(t)
	api := w.api

	var info sessions.Info
	api.do("POST", "/v1/sessions", map[string]any{"image": "python"}, 201, &info)
	p := "/v1/sessions/" + info.ID
	var cells sessions.Cells
	api.do("GET", p+"/cells", nil, 200, &cells)
	if len(cells.Cells) != 0 || cells.Cells == nil {
		t.Fatalf("a new session's cells: %+v", cells)
	}
	for _, src := range []string{"x = 41", figureCell, "1 / 0", "x + 1"} {
		var r sessions.CodeResult
		api.do("POST", p+"/code", map[string]any{"code": src}, 200, &r)
	}
	api.do("GET", p+"/cells", nil, 200, &cells)
	if len(cells.Cells) != 4 || cells.Dropped != 0 {
		t.Fatalf("%d cells, %d dropped: want 4 and none", len(cells.Cells), cells.Dropped)
	}
	fig := cells.Cells[1]
	if fig.Code != figureCell || fig.Text != "'drawn'" || len(fig.Display) != 1 || fig.Seq != 2 {
		t.Fatalf("the figure's cell: %+v", fig)
	}
	raw, err := base64.StdEncoding.DecodeString(fig.Display[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil || img.Bounds().Dx() != 48 || img.Bounds().Dy() != 32 || fig.Display[0].Width != 48 || fig.Display[0].Height != 32 {
		t.Fatalf("the figure: %dx%d, decodes %v: want a 48x32 PNG", fig.Display[0].Width, fig.Display[0].Height, err)
	}
	if c := cells.Cells[2]; c.Error == nil || c.Error.Name != "ZeroDivisionError" || !strings.Contains(c.Error.Traceback, "ZeroDivisionError") {
		t.Fatalf("the raising cell: %+v", c)
	}
	if c := cells.Cells[3]; c.Text != "42" || c.Seq != 4 || c.At.Before(cells.Cells[0].At) {
		t.Fatalf("the last cell: %+v", c)
	}

	for range sessions.MaxCells {
		api.do("POST", p+"/code", map[string]any{"code": "x"}, 200, nil)
	}
	api.do("GET", p+"/cells", nil, 200, &cells)
	if len(cells.Cells) != sessions.MaxCells || cells.Dropped != 4 || cells.Cells[0].Seq != 5 {
		t.Fatalf("after %d more: %d cells from %d, %d dropped: want %d from 5, 4 dropped",
			sessions.MaxCells, len(cells.Cells), cells.Cells[0].Seq, cells.Dropped, sessions.MaxCells)
	}

	api.do("DELETE", p, nil, 200, nil)
	api.do("GET", p+"/cells", nil, 200, &cells)
	if len(cells.Cells) != sessions.MaxCells {
		t.Fatalf("after the delete: %d cells, want the %d kept", len(cells.Cells), sessions.MaxCells)
	}

	var none sessions.Info
	api.do("POST", "/v1/sessions", map[string]any{"image": "python"}, 201, &none)
	api.do("DELETE", "/v1/sessions/"+none.ID, nil, 200, nil)
	api.do("GET", "/v1/sessions/"+none.ID+"/cells", nil, 410, nil)
}
