package console

import (
	"encoding/base64"
	"html/template"
	"strings"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// figure is a display output as a page shows it: an image inline, its
// bytes in a data: URL.
type figure struct {
	Src           template.URL
	MIME          string
	Width, Height int
}

// inlineTypes are the display types a page shows as images. SVG is not
// one (it is a document, with scripts of its own), nor is anything else a
// job's program wrote: a page shows no markup of a job's.
var inlineTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// figures are the display outputs a page shows, in their order, and how
// many it leaves out: a type not in inlineTypes, or data that is not
// standard base64 (the data: URL is typed as safe here, so its bytes are
// checked first, newlines included, which the decoder would skip).
func figures(ds []jobs.Display) (shown []figure, left int) {
	for _, d := range ds {
		if !inlineTypes[d.MIME] || strings.ContainsAny(d.Data, "\r\n") {
			left++
			continue
		}
		if _, err := base64.StdEncoding.DecodeString(d.Data); err != nil || d.Data == "" {
			left++
			continue
		}
		shown = append(shown, figure{
			Src:  template.URL("data:" + d.MIME + ";base64," + d.Data),
			MIME: d.MIME, Width: d.Width, Height: d.Height,
		})
	}
	return shown, left
}
