package console

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"html/template"
	"image"
	_ "image/gif" // the figures' formats image.DecodeConfig knows
	_ "image/jpeg"
	_ "image/png"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
	sessionapi "github.com/sandfleet/sandfleet/pkg/sessions"
)

// A session's page shows its recent cells (pkg/sessions Client.Cells):
// each one's code, output, value or error as text, escaped as every
// value is, and its figures inline. A figure is the session's own bytes:
// it becomes an <img> with a data: URL only when its type is an image
// type allowed here and its bytes decode as that image; html/template
// would refuse any other data: URL, and typing this one as template.URL
// is the one place a page trusts a URL it did not write. Other display
// types (text/html above all) are never rendered, only counted.

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

// cellView is a cell as the page shows it.
type cellView struct {
	sessionapi.Cell
	Figures []figure
	// Hidden counts its display outputs not shown: dropped by the worker,
	// or not an image shown here.
	Hidden int
}

// cellsView is a session's history as its page shows it.
type cellsView struct {
	Cells   []cellView
	Dropped int
	// Missing says why no history could be read ("": it was).
	Missing string
}

// cellsOf reads session id's history for its page, under a short
// deadline: a slow worker leaves a note, not a held page.
func cellsOf(ctx context.Context, client *sessionapi.Client, id string) cellsView {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	h, err := client.Cells(ctx, id)
	switch {
	case errors.Is(err, sessionapi.ErrGone):
		return cellsView{Missing: "No cells are kept for it: its worker keeps a session's cells while it runs and a while after it ends, and not across a pause or a lost worker."}
	case err != nil:
		return cellsView{Missing: "Its cells could not be read: " + err.Error()}
	}
	v := cellsView{Dropped: h.Dropped, Cells: make([]cellView, 0, len(h.Cells))}
	for _, c := range h.Cells {
		cv := cellView{Cell: c, Hidden: c.DisplayDropped}
		for _, d := range c.Display {
			if f, ok := figureOf(d); ok {
				cv.Figures = append(cv.Figures, f)
			} else {
				cv.Hidden++
			}
		}
		cv.Display = nil // shown as Figures only
		v.Cells = append(v.Cells, cv)
	}
	return v
}

// Took is how long the cell ran, as the pages say durations.
func (c cellView) Took() string { return shortDur(time.Duration(c.DurationMS) * time.Millisecond) }
