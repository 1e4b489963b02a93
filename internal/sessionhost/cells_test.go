package sessionhost

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

var testNow = time.Unix(1_700_000_000, 0).UTC()

func pngOf(w, h, pad int) []byte {
	b := []byte("\x89PNG\r\n\x1a\n")
	b = binary.BigEndian.AppendUint32(b, 13)
	b = append(b, "IHDR"...)
	b = binary.BigEndian.AppendUint32(b, uint32(w))
	b = binary.BigEndian.AppendUint32(b, uint32(h))
	return append(b, make([]byte, pad)...)
}

func figure(raw int) jobs.Display {
	return jobs.Display{MIME: "image/png", Data: base64.StdEncoding.EncodeToString(pngOf(4, 3, raw)), Width: 4, Height: 3}
}

func decodeCells(t *testing.T, p cellsPage) []sessions.Cell {
	t.Helper()
	out := make([]sessions.Cell, len(p.Cells))
	for i, raw := range p.Cells {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// The history keeps the last MaxCells cells and at most MaxCellsBytes of
// them, figures counted, and says how many it forgot; a cell alone over
// the bytes keeps its first figures and counts the rest.
func TestCellLogBounds(t *testing.T) {
	t.Parallel()
	t.Run("count", func(t *testing.T) {
		t.Parallel()
		c := &cellLog{}
		for range sessions.MaxCells + 5 {
			c.add(sessions.Cell{Code: "1+1", Text: "2"})
		}
		p := c.read(0, 1<<30)
		cells := decodeCells(t, p)
		if len(cells) != sessions.MaxCells || p.Dropped != 5 || cells[0].Seq != 6 || cells[len(cells)-1].Seq != sessions.MaxCells+5 || p.More {
			t.Fatalf("%d cells (seq %d..), %d dropped, more %v: want %d from 6, 5 dropped", len(cells), cells[0].Seq, p.Dropped, p.More, sessions.MaxCells)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		t.Parallel()
		c := &cellLog{}
		// 1.5 MiB of base64 a cell: two fit in 4 MiB, a third pushes the
		// oldest out.
		for range 3 {
			c.add(sessions.Cell{Code: "plot()", Display: []jobs.Display{figure(1152 << 10)}})
		}
		p := c.read(0, 1<<30)
		cells := decodeCells(t, p)
		if len(cells) != 2 || p.Dropped != 1 || cells[0].Seq != 2 || c.size() > sessions.MaxCellsBytes {
			t.Fatalf("%d cells from %d, %d dropped, %d bytes: want 2 from seq 2, 1 dropped", len(cells), cells[0].Seq, p.Dropped, c.size())
		}
		// One cell of four such figures (6 MiB): it keeps two, says two
		// dropped, and is all the history then holds.
		c.add(sessions.Cell{Code: "plots()", Display: []jobs.Display{figure(1152 << 10), figure(1152 << 10), figure(1152 << 10), figure(1152 << 10)}, DisplayDropped: 1})
		p = c.read(0, 1<<30)
		cells = decodeCells(t, p)
		if len(cells) != 1 || p.Dropped != 3 || len(cells[0].Display) != 2 || cells[0].DisplayDropped != 3 || c.size() > sessions.MaxCellsBytes {
			t.Fatalf("%d cells, %d dropped, %d figures (%d dropped), %d bytes: want 1 cell of 2 figures, 3 dropped of each",
				len(cells), p.Dropped, len(cells[0].Display), cells[0].DisplayDropped, c.size())
		}
	})
	t.Run("pages", func(t *testing.T) {
		t.Parallel()
		c := &cellLog{}
		for range 3 {
			c.add(sessions.Cell{Code: "draw()", Display: []jobs.Display{figure(600 << 10)}})
		}
		// A page of 1 MiB carries one such cell; the next page starts
		// after it; a cell alone over the budget comes without its figure.
		var seqs []int64
		for after := int64(0); ; {
			p := c.read(after, 1<<20)
			cells := decodeCells(t, p)
			if len(cells) != 1 {
				t.Fatalf("a page of %d cells, want 1", len(cells))
			}
			seqs = append(seqs, cells[0].Seq)
			if !p.More {
				break
			}
			after = cells[0].Seq
		}
		if len(seqs) != 3 || seqs[2] != 3 {
			t.Fatalf("pages gave %v, want 1, 2, 3", seqs)
		}
		p := c.read(0, 100<<10)
		if len(p.Cells) != 1 || !p.More {
			t.Fatalf("a budget under one cell: %d cells, more %v: want the first alone", len(p.Cells), p.More)
		}
		if cell := decodeCells(t, p)[0]; len(p.Cells[0]) > 100<<10 || len(cell.Display) != 0 || cell.DisplayDropped != 1 || cell.Code != "draw()" {
			t.Fatalf("the first cell over the budget: %d bytes, %d figures, %d dropped: want it without its figure, counted",
				len(p.Cells[0]), len(cell.Display), cell.DisplayDropped)
		}
	})
}

// A cell's code, value, output and error are cut at their bounds on a
// rune's start, and output that is not UTF-8 is left out; each says Cut.
func TestNewCellCuts(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", sessions.MaxCellCode) // 2 bytes a rune
	c := newCell(sessionapi.CodeRequest{Code: long, Context: "c1"}, &sessions.CodeResult{Text: long, Stdout: "AAEC", StdoutEncoding: "base64",
		Stderr: "warn", Error: &sessionapi.CodeError{Name: "ValueError", Value: long, Traceback: "tb"}, DurationMS: 7}, testNow)
	if !c.Cut || len(c.Code) > sessions.MaxCellCode || len(c.Text) > sessions.MaxCellText || len(c.Error.Value) > sessions.MaxCellText {
		t.Fatalf("cut %v, code %d, text %d, error %d bytes", c.Cut, len(c.Code), len(c.Text), len(c.Error.Value))
	}
	for _, s := range []string{c.Code, c.Text, c.Error.Value} {
		if !utf8.ValidString(s) || len(s) < sessions.MaxCellText-1 {
			t.Fatalf("a cut text of %d bytes, valid UTF-8 %v", len(s), utf8.ValidString(s))
		}
	}
	if c.Stdout != "" || c.Stderr != "warn" || c.Error.Name != "ValueError" || c.Context != "c1" || c.DurationMS != 7 || !c.At.Equal(testNow) {
		t.Fatalf("%+v", c)
	}
	if c := newCell(sessionapi.CodeRequest{Code: "1"}, &sessions.CodeResult{Text: "1"}, testNow); c.Cut {
		t.Fatal("a short cell says cut")
	}
}

// A read whose first cell is over its budget (a fleet's message smaller
// than a cell's figures) sends the cell without them, made once when the
// cell was kept: a client asking again and again makes the worker decode
// no megabytes of figures each time. Not parallel: it counts the bytes
// the process allocates.
func TestCellReadOverBudgetCostsLittle(t *testing.T) {
	c := &cellLog{}
	c.add(sessions.Cell{Code: "plot()", Display: []jobs.Display{figure(2 << 20)}})
	if c.size() < 2<<20 {
		t.Fatalf("the cell holds %d bytes, want its 2 MiB figure", c.size())
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const reads = 10
	for range reads {
		p := c.read(0, 1<<20)
		if len(p.Cells) != 1 || len(p.Cells[0]) > 1<<20 {
			t.Fatalf("a read over the budget: %d cells, want the first without its figure", len(p.Cells))
		}
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("%d reads allocated %d bytes, want well under a figure's 2 MiB each", reads, got)
	}
}
