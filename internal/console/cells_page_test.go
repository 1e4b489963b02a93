package console_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"image"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/sessionhost"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// cellBox is a session's sandbox whose cells answer their code as their
// value, and "png W H" with a W×H PNG figure; it stands in for
// internal/executor's Session at the session host's boundary.
type cellBox struct {
	done chan struct{}
	once sync.Once
}

var _ sessionhost.Sandbox = (*cellBox)(nil)

func (b *cellBox) Do(_ context.Context, req *envelope.Request) (*envelope.Reply, error) {
	if req.Op != sessionapi.OpCode {
		return &envelope.Reply{ID: req.ID, Result: json.RawMessage("{}")}, nil
	}
	var cr sessionapi.CodeRequest
	_ = json.Unmarshal(req.Body, &cr)
	r := &sessionapi.CodeResult{Language: "python", Text: cr.Code, DurationMS: 4}
	var w, h int
	if n, _ := fmt.Sscanf(cr.Code, "png %d %d", &w, &h); n == 2 {
		var buf bytes.Buffer
		_ = png.Encode(&buf, image.NewGray(image.Rect(0, 0, w, h)))
		r.Display = []sessionapi.Display{{MIME: "image/png", Data: base64.StdEncoding.EncodeToString(buf.Bytes())}}
	}
	res, _ := json.Marshal(r)
	return &envelope.Reply{ID: req.ID, Result: res}, nil
}
func (b *cellBox) Close(context.Context) { b.once.Do(func() { close(b.done) }) }
func (b *cellBox) Done() <-chan struct{} { return b.done }
func (b *cellBox) Why() string           { return "" }
func (b *cellBox) ImageID() string       { return "sha256:fake" }
func (b *cellBox) Archive(context.Context, io.Writer) (*envelope.ArchiveReport, error) {
	return nil, errors.New("keeps no files")
}

// fakeSessions serves sessions on cellBoxes.
func fakeSessions(t testing.TB, js jetstream.JetStream) *sessions.Client {
	host, err := sessionhost.New(t.Context(), js, func(context.Context, sessionhost.StartSpec) (sessionhost.Sandbox, error) {
		return &cellBox{done: make(chan struct{})}, nil
	}, sessionhost.Config{Worker: "w-fake", Logger: slog.New(slog.DiscardHandler)})
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

// hostReady waits until host takes creates: a create sent before it
// listens finds no worker (429).
func hostReady(t testing.TB, host *sessionhost.Host, done chan error) {
	t.Helper()
	select {
	case <-host.Ready():
	case err := <-done:
		done <- err
		t.Fatalf("the session host ended before it listened: %v", err)
	}
}

var imgRE = regexp.MustCompile(`<img class="figure" src="data:image/png;base64,([A-Za-z0-9+/=]+)" width="(\d+)" height="(\d+)"`)

// checkFigure finds the page's one figure and checks that its data is a
// PNG of w×h, as its attributes say.
func checkFigure(t *testing.T, body string, w, h int) {
	t.Helper()
	m := imgRE.FindAllStringSubmatch(body, -1)
	if len(m) != 1 {
		t.Fatalf("%d figures on the page, want 1", len(m))
	}
	b, err := base64.StdEncoding.DecodeString(m[0][1])
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil || cfg.Width != w || cfg.Height != h || m[0][2] != fmt.Sprint(w) || m[0][3] != fmt.Sprint(h) {
		t.Fatalf("the figure: %dx%d (%v), attributes %sx%s: want a %dx%d PNG", cfg.Width, cfg.Height, err, m[0][2], m[0][3], w, h)
	}
}

// A session's page shows its cells, newest last: the code, the value
// escaped (a value that is markup shows as text), and a figure inline as
// a PNG of its size; a session that ran none says so; once the session
// is deleted, its page still shows them.
func TestSessionPageCells(t *testing.T) {
	t.Parallel()
	f := setup(t, options{sessions: fakeSessions})
	var empty sessions.Info
	f.api(t, "POST", "/v1/sessions", map[string]any{}, http.StatusCreated, &empty)
	if p := f.get(t, "/sessions/"+empty.ID, f.alice); p.status != http.StatusOK || !strings.Contains(p.body, `id="cells-none"`) {
		t.Fatalf("a session without cells: %d, the hint missing", p.status)
	}

	var info sessions.Info
	f.api(t, "POST", "/v1/sessions", map[string]any{}, http.StatusCreated, &info)
	for _, code := range []string{"x = 1", "png 30 20", "<script>alert(1)</script>"} {
		f.api(t, "POST", "/v1/sessions/"+info.ID+"/code", map[string]any{"code": code}, http.StatusOK, nil)
	}
	var cells sessions.Cells
	if p := f.get(t, "/v1/sessions/"+info.ID+"/cells", f.alice); p.status != http.StatusOK || json.Unmarshal([]byte(p.body), &cells) != nil {
		t.Fatalf("GET .../cells: %d %.200s", p.status, p.body)
	} else {
		matchesSchema(t, "CellList", p.body)
	}
	if len(cells.Cells) != 3 || len(cells.Cells[1].Display) != 1 || cells.Cells[1].Display[0].Width != 30 {
		t.Fatalf("GET .../cells: %d cells: want 3, the second with a 30x20 figure", len(cells.Cells))
	}

	check := func(when string) {
		t.Helper()
		p := f.get(t, "/sessions/"+info.ID, f.alice)
		if p.status != http.StatusOK {
			t.Fatalf("%s: %d", when, p.status)
		}
		if strings.Contains(p.body, "<script>alert(1)") {
			t.Fatalf("%s: a cell's value reached the page as markup", when)
		}
		esc := html.EscapeString("<script>alert(1)</script>")
		first, last := strings.Index(p.body, ">x = 1</pre>"), strings.LastIndex(p.body, esc)
		if first < 0 || last < 0 || first > last || !strings.Contains(p.body, `id="cell-3"`) {
			t.Fatalf("%s: the cells' code and values, oldest first, not on the page", when)
		}
		checkFigure(t, p.body, 30, 20)
	}
	check("running")
	if p := f.do(t, "DELETE", "/v1/sessions/"+info.ID, f.alice, nil); p.status != http.StatusOK {
		t.Fatalf("DELETE: %d", p.status)
	}
	testutil.Eventually(t, 10*time.Second, "the session recorded ended", func() bool {
		return strings.Contains(f.get(t, "/sessions/"+info.ID, f.alice).body, "deleted")
	})
	check("ended")

	// Another token's session is not found, its cells with it.
	if p := f.get(t, "/v1/sessions/"+info.ID+"/cells", f.viewer); p.status != http.StatusNotFound {
		t.Fatalf("another token's GET .../cells: %d, want 404", p.status)
	}
	if p := f.get(t, "/sessions/"+info.ID, f.viewer); p.status != http.StatusNotFound || strings.Contains(p.body, "x = 1") {
		t.Fatalf("another token's session page: %d", p.status)
	}
}

// matchesSchema checks body against the schema name of the API's
// document, where additionalProperties: false makes a field the
// document does not name an error.
func matchesSchema(t *testing.T, name, body string) {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(gateway.Document)
	if err != nil {
		t.Fatal(err)
	}
	ref := doc.Components.Schemas[name]
	if ref == nil {
		t.Fatalf("openapi.yaml has no schema %s", name)
	}
	var v any
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	if err := ref.Value.VisitJSON(v); err != nil {
		t.Fatalf("the answer is not a %s of openapi.yaml: %v", name, err)
	}
}
