package console

import (
	"context"
	"errors"
	"time"

	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	fleetsessions "github.com/sandfleet/sandfleet/pkg/sessions"
)

// A session's page shows its recent cells (pkg/sessions Client.Cells):
// each one's code, output, value or error as text, escaped as every
// value is, and its figures inline as a job's page shows its own
// (display.go).

// cellView is a cell as the page shows it.
type cellView struct {
	fleetsessions.Cell
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
func cellsOf(ctx context.Context, client *fleetsessions.Client, id string) cellsView {
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
		cv := cellView{Cell: c}
		cv.Figures, cv.Hidden = figures(c.Display)
		cv.Hidden += c.DisplayDropped
		cv.Display = nil // shown as Figures only
		v.Cells = append(v.Cells, cv)
	}
	return v
}

// Took is how long the cell ran, as the pages say durations.
func (c cellView) Took() string { return shortDur(time.Duration(c.DurationMS) * time.Millisecond) }
