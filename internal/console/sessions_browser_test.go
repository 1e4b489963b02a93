package console_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/sessionhost"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// realSessions serves sessions on real Docker sandboxes.
func realSessions(t testing.TB, js jetstream.JetStream) *sessions.Client {
	cfg := executor.Config{WorkerID: fmt.Sprintf("console-sess-%d", os.Getpid())}
	if img := os.Getenv("SANDFLEET_TEST_IMAGE"); img != "" {
		cfg.Presets = map[string]executor.Preset{"python": {Image: img, MainFile: "main.py", Argv: []string{"python3", "main.py"}}}
	}
	exec := workertest.Sandbox(t, cfg)
	host, err := sessionhost.New(t.Context(), js, func(ctx context.Context, s sessionhost.StartSpec) (sessionhost.Sandbox, error) {
		return exec.StartSession(ctx, executor.SessionSpec{ID: s.ID, Image: s.Image, Limits: s.Limits, Lifetime: s.Lifetime, OnEvent: s.OnEvent})
	}, sessionhost.Config{Worker: "w-sessions", Limits: exec.ResolveLimits, Images: exec.HasPreset})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- host.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	hostReady(t, host, done)
	c, err := sessions.NewClient(t.Context(), js, "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *fleet) api(t *testing.T, method, path string, body any, want int, out any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(t.Context(), method, f.url+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+f.alice)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != want {
		t.Fatalf("%s %s: %d", method, path, res.StatusCode)
	}
	if out != nil {
		_ = json.NewDecoder(res.Body).Decode(out)
	}
}

// The sessions pages in a browser, on real Docker sessions: the list
// shows the viewer's session with its owner, worker and processes; its
// page opens a terminal in which what is typed runs and its output shows.
func TestBrowserSessions(t *testing.T) {
	testutil.NeedBrowser(t)
	f := setup(t, options{sessions: realSessions})
	var info sessions.Info
	f.api(t, "POST", "/v1/sessions", map[string]any{"image": "python"}, http.StatusCreated, &info)
	f.api(t, "POST", "/v1/sessions/"+info.ID+"/exec", map[string]any{"cmd": []string{"sleep", "300"}, "background": true}, http.StatusOK, nil)
	b := startBrowser(t, f, 1280, 900)

	b.do(t, "sessions page", chromedp.Navigate(f.url+"/sessions"), chromedp.WaitVisible(chromedp.ID("sessions")))
	row := b.text(t, "#sessions tbody tr")
	for _, want := range []string{info.ID, "running", "alice", "w-sessions", "python"} {
		if !strings.Contains(row, want) {
			t.Fatalf("the session's row %q lacks %q", row, want)
		}
	}
	if got := eval[string](t, b, "document.querySelector('#sessions tbody tr td:last-child').textContent"); got != "1" {
		t.Fatalf("processes: %q, want 1", got)
	}
	b.screenshot(t, "sessions")

	b.do(t, "session page", chromedp.Navigate(f.url+"/sessions/"+info.ID), chromedp.WaitVisible(chromedp.ID("processes")))
	b.waitText(t, "#processes", "sleep 300", 5*time.Second)
	b.do(t, "open the terminal", chromedp.Click(chromedp.ID("terminal-open")))
	b.waitText(t, "#terminal-status", "connected", 20*time.Second)
	b.waitText(t, "#terminal", "$", 20*time.Second) // the shell's prompt
	b.do(t, "type in the terminal", chromedp.KeyEvent("echo hel''lo"), chromedp.KeyEvent(kb.Enter))
	b.waitText(t, "#terminal", "hello", 20*time.Second)
	b.screenshot(t, "session")
	b.noDialogs(t)
}

// pngCell is a cell that shows a w×h PNG by the display protocol the
// launcher reads (a file in the display directory), without matplotlib:
// a whole image, which a browser draws.
func pngCell(w, h int) string {
	return fmt.Sprintf(`import os, struct, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
w, h = %d, %d
rows = b"".join(b"\0" + bytes([200, 40, 40]) * w for _ in range(h))
data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
os.makedirs("/tmp/.sandfleet-display", exist_ok=True)
open("/tmp/.sandfleet-display/000001.png", "wb").write(data)
print("drawn")`, w, h)
}

// A real session's cells on its page, in a browser: a cell that shows a
// figure comes back through GET .../cells as a PNG of its size, and its
// page draws it at that size beside the cell's code; a cell whose value
// is a script tag shows it as text and runs nothing; a cell run while the
// page is open arrives on it.
func TestBrowserSessionCells(t *testing.T) {
	testutil.NeedBrowser(t)
	f := setup(t, options{sessions: realSessions})
	var info sessions.Info
	f.api(t, "POST", "/v1/sessions", map[string]any{"image": "python"}, http.StatusCreated, &info)
	var res sessions.CodeResult
	f.api(t, "POST", "/v1/sessions/"+info.ID+"/code", map[string]any{"code": pngCell(48, 32)}, http.StatusOK, &res)
	if res.Stdout != "drawn\n" || len(res.Display) != 1 {
		t.Fatalf("the figure's cell: stdout %q, %d display outputs, error %+v", res.Stdout, len(res.Display), res.Error)
	}
	f.api(t, "POST", "/v1/sessions/"+info.ID+"/code", map[string]any{"code": `"<script>alert(1)</script>"`}, http.StatusOK, nil)

	var cells sessions.Cells
	if p := f.get(t, "/v1/sessions/"+info.ID+"/cells", f.alice); p.status != http.StatusOK || json.Unmarshal([]byte(p.body), &cells) != nil {
		t.Fatalf("GET .../cells: %d %.200s", p.status, p.body)
	}
	if len(cells.Cells) != 2 || len(cells.Cells[0].Display) != 1 || cells.Cells[0].Stdout != "drawn\n" {
		t.Fatalf("%d cells: want 2, the first with its figure and output", len(cells.Cells))
	}
	d := cells.Cells[0].Display[0]
	raw, err := base64.StdEncoding.DecodeString(d.Data)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil || d.MIME != "image/png" || img.Bounds().Dx() != 48 || img.Bounds().Dy() != 32 || d.Width != 48 || d.Height != 32 {
		t.Fatalf("the figure: %s %dx%d, decodes: %v: want a 48x32 PNG", d.MIME, d.Width, d.Height, err)
	}

	b := startBrowser(t, f, 1280, 900)
	b.do(t, "session page", chromedp.Navigate(f.url+"/sessions/"+info.ID), chromedp.WaitVisible(chromedp.ID("cells")))
	b.waitText(t, "#cell-1 pre.code", "zlib.compress(rows)", 5*time.Second)
	b.waitText(t, "#cell-1 pre.output", "drawn", 5*time.Second)
	if got := eval[[]int](t, b, `(() => { const i = document.querySelector('#cell-1 img.figure'); return i && i.complete ? [i.naturalWidth, i.naturalHeight] : [] })()`); len(got) != 2 || got[0] != 48 || got[1] != 32 {
		t.Fatalf("the figure drawn at %v, want 48x32", got)
	}
	if got := eval[string](t, b, `document.querySelector('#cell-2 pre.value').textContent`); got != `'<script>alert(1)</script>'` {
		t.Fatalf("the script cell's value %q", got)
	}
	if n := eval[int](t, b, `document.querySelectorAll('#cells script').length`); n != 0 {
		t.Fatalf("%d script elements among the cells", n)
	}
	// A cell run while the page is open arrives on it.
	f.api(t, "POST", "/v1/sessions/"+info.ID+"/code", map[string]any{"code": "6 * 7"}, http.StatusOK, nil)
	b.waitText(t, "#cell-3 pre.value", "42", 20*time.Second)
	b.screenshot(t, "session-cells")
	b.noDialogs(t)
}
