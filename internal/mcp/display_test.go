package mcp

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// gif is what http.DetectContentType takes for a GIF.
const gif = "GIF89a\x01\x00\x01\x00"

func images(res *sdk.CallToolResult) []string {
	var out []string
	for _, c := range res.Content {
		if img, ok := c.(*sdk.ImageContent); ok {
			out = append(out, img.MIMEType+":"+string(img.Data))
		}
	}
	return out
}

func imageServer(t *testing.T, maxOutput int, maxImage int64) *Server {
	t.Helper()
	s, err := NewServer(Options{MaxOutput: maxOutput, MaxImageBytes: maxImage, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		func(*Caller) (Runner, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func display(mime, data string) jobs.Display {
	return jobs.Display{MIME: mime, Data: base64.StdEncoding.EncodeToString([]byte(data))}
}

// A job's figures (display outputs: a matplotlib plot it showed) come back
// as image content within the image bound; what is not shown is said.
func TestRenderDisplays(t *testing.T) {
	t.Parallel()
	big := gif + strings.Repeat("x", 100)
	s := imageServer(t, 4096, int64(len(gif)+len(big)-1))
	res := &jobs.Result{ID: "j1", Status: jobs.StatusSucceeded, DisplayDropped: 2, Display: []jobs.Display{
		display("image/gif", gif),
		display("text/html", "<b>hi</b>"),
		display("image/png", "not a PNG"),
		display("image/gif", big), // past what is left of the bound
	}}
	out := s.render(context.Background(), nil, res)
	if got := images(out); len(got) != 1 || got[0] != "image/gif:"+gif {
		t.Errorf("images %q, want the one GIF", got)
	}
	txt := resultText(out)
	for _, want := range []string{"figure 1 (image/gif", "(text/html, 9 bytes) is not shown: not an image",
		"(image/png, 9 bytes) is not shown: not an image", "is not shown: over the result's bound for images", "2 more display outputs"} {
		if !strings.Contains(txt, want) {
			t.Errorf("the text does not say %q: %q", want, txt)
		}
	}
}

// A session's cell says what it raised and its value, whatever their
// size, within the bound, and returns its figures as images.
func TestCellResultBound(t *testing.T) {
	t.Parallel()
	const bound = 2048
	s := imageServer(t, bound, 0)
	r := &sessions.CodeResult{
		Text:    "VALUE" + strings.Repeat("v", 100000) + "END",
		Stdout:  strings.Repeat("o", 50000),
		Stderr:  strings.Repeat("é", 30000),
		Error:   &sessionapi.CodeError{Name: "ValueError", Value: strings.Repeat("w", 100000), Traceback: "Traceback\n" + strings.Repeat("t", 10000)},
		Display: []jobs.Display{display("image/gif", gif)},
	}
	out := s.cellResult(r)
	txt := resultText(out)
	if len(txt) > bound || !utf8.ValidString(txt) {
		t.Errorf("%d bytes (bound %d), valid UTF-8 %v", len(txt), bound, utf8.ValidString(txt))
	}
	for _, want := range []string{"error: ValueError: ", "value: VALUE", "END", "bytes left out", "figure 1"} {
		if !strings.Contains(txt, want) {
			t.Errorf("the text does not say %q: %.600q", want, txt)
		}
	}
	if !out.IsError || len(images(out)) != 1 {
		t.Errorf("isError %v, images %d: want an error with its figure", out.IsError, len(images(out)))
	}

	// A command's streams, as large, too.
	exit := 0
	ex := s.execResult(&sessionapi.ExecResult{ExitCode: &exit, Stdout: strings.Repeat("o", 90000), Stderr: strings.Repeat("e", 90000), StdoutTruncated: true})
	if txt := resultText(ex); len(txt) > bound || !strings.Contains(txt, "bytes left out") || !strings.Contains(txt, "the sandbox kept only the start") {
		t.Errorf("exec: %d bytes (bound %d): %.300q", len(txt), bound, txt)
	}
}
