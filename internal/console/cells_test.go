package console

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/gif"
	"image/png"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

func encoded(t *testing.T, enc func(*bytes.Buffer, image.Image) error, w, h int) string {
	t.Helper()
	var b bytes.Buffer
	if err := enc(&b, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// Only an allowed image type whose bytes are that image becomes a data:
// URL, of the size its bytes say; anything else is not shown.
func TestFigureOf(t *testing.T) {
	t.Parallel()
	pngData := encoded(t, func(b *bytes.Buffer, m image.Image) error { return png.Encode(b, m) }, 30, 20)
	gifData := encoded(t, func(b *bytes.Buffer, m image.Image) error { return gif.Encode(b, m, nil) }, 5, 4)
	for _, tc := range []struct {
		name string
		d    jobs.Display
		w, h int
	}{
		{"png", jobs.Display{MIME: "image/png", Data: pngData, Width: 9999, Height: 1}, 30, 20},
		{"gif", jobs.Display{MIME: "image/gif", Data: gifData}, 5, 4},
		{"png said gif", jobs.Display{MIME: "image/gif", Data: pngData}, 0, 0},
		{"html", jobs.Display{MIME: "text/html", Data: base64.StdEncoding.EncodeToString([]byte("<script>alert(1)</script>"))}, 0, 0},
		{"svg", jobs.Display{MIME: "image/svg+xml", Data: base64.StdEncoding.EncodeToString([]byte("<svg onload=alert(1)/>"))}, 0, 0},
		{"not base64", jobs.Display{MIME: "image/png", Data: pngData[:20] + `"><script>`}, 0, 0},
		{"a header only", jobs.Display{MIME: "image/png", Data: pngData[:12]}, 0, 0},
	} {
		f, ok := figureOf(tc.d)
		if ok != (tc.w > 0) || f.Width != tc.w || f.Height != tc.h {
			t.Errorf("%s: %v, %dx%d: want %dx%d", tc.name, ok, f.Width, f.Height, tc.w, tc.h)
		}
		if ok && !strings.HasPrefix(string(f.Src), "data:"+tc.d.MIME+";base64,") {
			t.Errorf("%s: src %.40q", tc.name, f.Src)
		}
	}
}
