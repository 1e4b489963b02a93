package sessionhost

import (
	"encoding/json"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/sessionwire"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// A session's history of cells (sessionapi.OpCells): kept in the worker's
// memory, bounded per session by sessions.MaxCells and MaxCellsBytes,
// which an owner's cells fill however it likes. An ended session's is
// kept keepEndedFor after its end, at most keepEnded of them and
// keepEndedBytes in all on a worker (past them the owner holding the most
// loses its oldest), so that the page of a session an
// agent deleted at its end still shows what it ran. At the default 16
// sessions a worker then holds at most 16 × 4 + 16 = 80 MiB of
// histories, beside the answers kept for retries (calls.go).
const (
	keepEnded      = 16
	keepEndedBytes = 16 << 20
	keepEndedFor   = 15 * time.Minute
)

// cellLog is a session's history: each cell as its JSON, oldest first.
type cellLog struct {
	mu      sync.Mutex
	cells   []keptCell
	bytes   int
	seq     int64
	dropped int
}

type keptCell struct {
	seq  int64
	data json.RawMessage
	// bare is data without its figures (nil: it has none), made once at
	// add: what a read over its budget sends, which a client may ask for
	// again and again, and which must not cost a decoding of megabytes
	// of figures each time.
	bare json.RawMessage
}

// add keeps cell, numbered next, and forgets the oldest past the bounds.
func (c *cellLog) add(cell sessions.Cell) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	cell.Seq = c.seq
	data, err := json.Marshal(cell)
	for err == nil && len(data) > sessions.MaxCellsBytes && len(cell.Display) > 0 {
		cell.Display = cell.Display[:len(cell.Display)-1]
		cell.DisplayDropped++
		data, err = json.Marshal(cell)
	}
	if err != nil {
		c.dropped++
		return
	}
	k := keptCell{seq: cell.Seq, data: data}
	if len(cell.Display) > 0 {
		bare := cell
		bare.DisplayDropped += len(bare.Display)
		bare.Display = nil
		if b, err := json.Marshal(bare); err == nil {
			k.bare = b
		}
	}
	for len(c.cells) > 0 && (len(c.cells) >= sessions.MaxCells || c.bytes+k.size() > sessions.MaxCellsBytes) {
		c.bytes -= c.cells[0].size()
		c.cells[0] = keptCell{}
		c.cells = c.cells[1:]
		c.dropped++
	}
	c.cells = append(c.cells, k)
	c.bytes += k.size()
}

// size is the bytes k holds.
func (k keptCell) size() int { return len(k.data) + len(k.bare) }

// size is the bytes the history holds.
func (c *cellLog) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// cellsPage is sessions.Cells with its cells as kept.
type cellsPage struct {
	Cells   []json.RawMessage `json:"cells"`
	Dropped int               `json:"dropped,omitempty"`
	More    bool              `json:"more,omitempty"`
}

// read returns the cells after after, as many as fit budget bytes, and
// at least one: a cell alone over the budget (a fleet whose messages are
// smaller than a cell's figures) comes without its figures, counted as
// dropped, rather than as an answer NATS would refuse.
func (c *cellLog) read(after int64, budget int) cellsPage {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := cellsPage{Cells: []json.RawMessage{}, Dropped: c.dropped}
	n := 0
	for _, k := range c.cells {
		if k.seq <= after {
			continue
		}
		data := k.data
		if len(p.Cells) == 0 && len(data) > budget && k.bare != nil {
			data = k.bare
		}
		if len(p.Cells) > 0 && n+len(data) > budget {
			p.More = true
			break
		}
		p.Cells = append(p.Cells, data)
		n += len(data) + 1
	}
	return p
}

// cellBudget is the bytes of cells one answer carries: what a message of
// the fleet may, less room for the answer around them.
func (h *Host) cellBudget() int {
	max := h.nc.MaxPayload()
	if max <= 0 {
		max = 1 << 20
	}
	return int(max) - answerRoom - 1<<10
}

// serveCells answers a read of log. It is no call of the session: it
// takes none of its call slots, and its idle timeout goes on.
func (h *Host) serveCells(msg *nats.Msg, log *cellLog, body json.RawMessage) {
	var req sessions.CellsRequest
	if err := decode(body, &req); err != nil {
		answer(msg, nil, err)
		return
	}
	answer(msg, log.read(req.After, h.cellBudget()), nil)
}

// newCell is what the history keeps of a cell that ran req and answered
// res.
func newCell(req sessionapi.CodeRequest, res *sessions.CodeResult, at time.Time) sessions.Cell {
	cell := sessions.Cell{At: at, DurationMS: res.DurationMS, Context: req.Context, Language: res.Language, ExitCode: res.ExitCode, Reset: res.Reset, TimedOut: res.TimedOut,
		Display: res.Display, DisplayDropped: res.DisplayDropped}
	cut := func(s string, max int) string {
		if len(s) <= max {
			return s
		}
		cell.Cut = true
		for max > 0 && !utf8.RuneStart(s[max]) {
			max--
		}
		return s[:max]
	}
	text := func(s, encoding string) string {
		if encoding != "" { // not UTF-8: not shown as text
			cell.Cut = cell.Cut || s != ""
			return ""
		}
		return cut(s, sessions.MaxCellText)
	}
	cell.Code = cut(req.Code, sessions.MaxCellCode)
	cell.Text = cut(res.Text, sessions.MaxCellText)
	cell.Stdout = text(res.Stdout, res.StdoutEncoding)
	cell.Stderr = text(res.Stderr, res.StderrEncoding)
	if e := res.Error; e != nil {
		cell.Error = &sessionapi.CodeError{Name: cut(e.Name, 256), Value: cut(e.Value, sessions.MaxCellText),
			Traceback: cut(e.Traceback, sessions.MaxCellText)}
	}
	return cell
}

// endedCells is an ended session's history, answered until its time.
type endedCells struct {
	id    string
	owner string
	log   *cellLog
	sub   *nats.Subscription
	until time.Time
}

// keepCells goes on answering the reads of l's history after its end (a
// session that ran no cell leaves none), and forgets the oldest kept
// past the bounds. It subscribes before l's calls stop being answered,
// so that a read finds a responder throughout.
func (h *Host) keepCells(l *live) {
	if l.cells.size() == 0 {
		return
	}
	owner, id, log := l.info.Owner, l.info.ID, l.cells
	sub, err := h.nc.Subscribe(sessions.Subject(id, sessionapi.OpCells), func(msg *nats.Msg) {
		var call sessionwire.Call
		if json.Unmarshal(msg.Data, &call) != nil || call.Owner != owner {
			answer(msg, nil, sessionapi.Errorf(sessionapi.ErrNotFound, "no session %q", id))
			return
		}
		h.serveCells(msg, log, call.Body)
	})
	if err != nil {
		return // its history goes with it: the page says none is kept
	}
	// The server has the new responder before the live one goes: a read
	// routed from now on finds one of them.
	_ = h.nc.FlushTimeout(2 * time.Second)
	h.mu.Lock()
	h.ended = append(h.ended, &endedCells{id: id, owner: owner, log: log, sub: sub, until: time.Now().Add(keepEndedFor)})
	h.forgetCellsLocked(time.Now())
	h.mu.Unlock()
}

// forgetCellsLocked forgets the ended sessions' histories past their
// time, then, while over the bounds, the oldest of the owner holding the
// most (by count when over keepEnded, else by bytes): owners distrust
// each other, and one who makes and deletes many sessions must not evict
// the others' histories, only its own.
func (h *Host) forgetCellsLocked(now time.Time) {
	count := map[string]int{}
	size := map[string]int{}
	total := 0
	kept := h.ended[:0]
	for _, e := range h.ended {
		if !now.Before(e.until) {
			_ = e.sub.Unsubscribe()
			continue
		}
		kept = append(kept, e)
		n := e.log.size()
		count[e.owner]++
		size[e.owner] += n
		total += n
	}
	clear(h.ended[len(kept):])
	h.ended = kept
	for len(h.ended) > 0 && (len(h.ended) > keepEnded || total > keepEndedBytes) {
		by := size
		if len(h.ended) > keepEnded {
			by = count
		}
		heaviest := ""
		for o, n := range by {
			if heaviest == "" || n > by[heaviest] || n == by[heaviest] && o < heaviest {
				heaviest = o
			}
		}
		i := slices.IndexFunc(h.ended, func(e *endedCells) bool { return e.owner == heaviest })
		e := h.ended[i]
		_ = e.sub.Unsubscribe()
		n := e.log.size()
		count[e.owner]--
		size[e.owner] -= n
		if count[e.owner] == 0 {
			delete(count, e.owner)
			delete(size, e.owner)
		}
		total -= n
		h.ended = slices.Delete(h.ended, i, i+1)
	}
}

// forgetAllCells stops answering for the ended sessions' histories.
func (h *Host) forgetAllCells() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.ended {
		_ = e.sub.Unsubscribe()
	}
	h.ended = nil
}
