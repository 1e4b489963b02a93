package console

import (
	"bytes"
	"encoding/base64"
	"html/template"
	"image"
	_ "image/gif" // the figures' formats image.DecodeConfig knows
	_ "image/jpeg"
	_ "image/png"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// A job's page and a session's show display outputs, the job's own bytes,
// as figures: an <img> with a data: URL only when the output's type is an
// image type allowed here and its bytes decode as that image. html/template
// would refuse any other data: URL, and typing this one as template.URL is
// the one place a page trusts a URL it did not write. Other display types
// (text/html and SVG above all) are never rendered, only counted.

// figureFormats are the display types shown inline, by the format name
// image.DecodeConfig gives their bytes.
var figureFormats = map[string]string{"image/png": "png", "image/jpeg": "jpeg", "image/gif": "gif"}

// figure is a display output the page shows as an image.
type figure struct {
	Src           template.URL
	Width, Height int
}

// figureOf returns d as a figure, if it is an allowed image that decodes
// as what its type says; its size is its bytes', not what d claims.
func figureOf(d jobs.Display) (figure, bool) {
	format, ok := figureFormats[d.MIME]
	if !ok {
		return figure{}, false
	}
	b, err := base64.StdEncoding.DecodeString(d.Data)
	if err != nil {
		return figure{}, false
	}
	cfg, got, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil || got != format || cfg.Width <= 0 || cfg.Height <= 0 {
		return figure{}, false
	}
	// Encoded again, so that the URL is exactly the bytes checked.
	return figure{Src: template.URL("data:" + d.MIME + ";base64," + base64.StdEncoding.EncodeToString(b)),
		Width: cfg.Width, Height: cfg.Height}, true
}

// figures are the outputs of ds shown as figures, in order, and how many
// are not.
func figures(ds []jobs.Display) (shown []figure, left int) {
	for _, d := range ds {
		if f, ok := figureOf(d); ok {
			shown = append(shown, f)
		} else {
			left++
		}
	}
	return shown, left
}
