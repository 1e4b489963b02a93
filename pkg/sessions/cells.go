package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/sessionwire"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// A session's worker keeps the session's recent code cells, so that a
// person watching an agent's session sees what it ran and what came back
// (the console's session page shows them). The history is bounded, and
// read-only: reading it is no call of the session's (its idle timeout
// goes on), and it is read from the worker's memory only. An ended
// session's is kept a while after its end by the worker that held it; a
// session resumed on a worker starts a history of its own.

// The bounds of a session's history: the last MaxCells cells, at most
// MaxCellsBytes in all (their JSON, figures included); past them the
// oldest go first, and a cell alone over MaxCellsBytes loses its last
// figures. Each cell's code is cut at MaxCellCode bytes, its value,
// output and error at MaxCellText bytes each (Cell.Cut says so).
const (
	MaxCells      = 20
	MaxCellsBytes = 4 << 20
	MaxCellCode   = 8 << 10
	MaxCellText   = 4 << 10
)

// Cell is one code cell a session ran, as its history keeps it.
type Cell struct {
	// Seq counts the session's cells on its worker from 1.
	Seq        int64     `json:"seq"`
	At         time.Time `json:"at"` // when it started
	DurationMS int64     `json:"duration_ms"`
	Context    string    `json:"context,omitempty"`
	Language   string    `json:"language,omitempty"`
	Code       string    `json:"code"`
	ExitCode   *int      `json:"exit_code,omitempty"` // a bash cell's
	// Text is the value of its trailing expression (text/plain).
	Text     string                `json:"text,omitempty"`
	Stdout   string                `json:"stdout,omitempty"`
	Stderr   string                `json:"stderr,omitempty"`
	Error    *sessionapi.CodeError `json:"error,omitempty"`
	Reset    bool                  `json:"reset,omitempty"`
	TimedOut bool                  `json:"timed_out,omitempty"`
	// Cut is true when some of its text was cut at the bounds (output
	// that is not UTF-8 is left out, and cut too).
	Cut bool `json:"cut,omitempty"`
	// Display are its figures as its answer had them (checked images:
	// image/png), and DisplayDropped those not kept, at the cell's or
	// the history's bounds.
	Display        []jobs.Display `json:"display,omitempty"`
	DisplayDropped int            `json:"display_dropped,omitempty"`
}

// CellsRequest reads the history from the cell after After (0: all).
type CellsRequest struct {
	After int64 `json:"after,omitempty"`
}

// Cells is a session's history, oldest first.
type Cells struct {
	Cells []Cell `json:"cells"`
	// Dropped counts the cells run before the oldest kept: past the
	// bounds, no longer kept.
	Dropped int `json:"dropped,omitempty"`
	// More is true when the answer was cut to fit a message: the rest
	// follows the last cell given (Client.Cells reads it all).
	More bool `json:"more,omitempty"`
}

// Cells reads session id's recent cells, oldest first. It resumes
// nothing: a session whose worker keeps no history (it ended long ago, its
// worker was lost, it is paused) is ErrGone, one that does not exist (or
// is another owner's) ErrNotFound.
func (c *Client) Cells(ctx context.Context, id string) (*Cells, error) {
	if !ValidID(id) {
		return nil, sessionapi.Errorf(sessionapi.ErrNotFound, "no session %q", id)
	}
	var all Cells
	for after := int64(0); ; {
		data, err := jsonCall(c.owner, CellsRequest{After: after})
		if err != nil {
			return nil, err
		}
		var page Cells
		err = c.readCells(ctx, id, data, &page)
		if errors.Is(err, nats.ErrNoResponders) {
			if _, err := c.Get(ctx, id); err != nil {
				return nil, err
			}
			return nil, sessionapi.Errorf(sessionapi.ErrGone, "session %s: no worker keeps its cells", id)
		}
		if err != nil {
			return nil, err
		}
		if after == 0 {
			all.Dropped = page.Dropped
		}
		all.Cells = append(all.Cells, page.Cells...)
		if !page.More || len(page.Cells) == 0 {
			if all.Cells == nil {
				all.Cells = []Cell{}
			}
			return &all, nil
		}
		after = page.Cells[len(page.Cells)-1].Seq
	}
}

// jsonCall is a Call of owner with body.
func jsonCall(owner string, body any) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return json.Marshal(sessionwire.Call{Owner: owner, Body: b})
}

// cellsTry bounds one read of a history. A read sent as its session ends
// can go unanswered (routed to the live session's responder just before
// it goes); a read does no harm twice, so it is asked again, within
// CallTimeout in all.
const cellsTry = 5 * time.Second

func (c *Client) readCells(ctx context.Context, id string, data []byte, page *Cells) error {
	ctx, cancel := context.WithTimeout(ctx, c.CallTimeout)
	defer cancel()
	for {
		tctx, tcancel := context.WithTimeout(ctx, cellsTry)
		err := c.request(tctx, Subject(id, sessionapi.OpCells), data, 0, page)
		tcancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
}
