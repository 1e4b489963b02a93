package sessionhost_test

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/sessionhost"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// codeReply is the fake's cell: its value is its code; "png W H" shows
// a PNG of that size, "raise" raises.
func codeReply(req *envelope.Request) *envelope.Reply {
	var cr sessionapi.CodeRequest
	_ = json.Unmarshal(req.Body, &cr)
	r := &sessionapi.CodeResult{Language: "python", Text: cr.Code, DurationMS: 3}
	var w, h int
	if n, _ := fmt.Sscanf(cr.Code, "png %d %d", &w, &h); n == 2 {
		b := []byte("\x89PNG\r\n\x1a\n")
		b = binary.BigEndian.AppendUint32(b, 13)
		b = append(b, "IHDR"...)
		b = binary.BigEndian.AppendUint32(b, uint32(w))
		b = binary.BigEndian.AppendUint32(b, uint32(h))
		r.Display = []sessionapi.Display{{MIME: "image/png", Data: base64.StdEncoding.EncodeToString(b)}}
	}
	if cr.Code == "raise" {
		r.Text, r.Error = "", &sessionapi.CodeError{Name: "ValueError", Value: "no", Traceback: "Traceback..."}
	}
	return answer(req, r)
}

// A session's cells read back in order with their values, errors and
// figures; reading them is no call (the idle clock goes on); another
// owner reads nothing; and once the session is deleted, its worker still
// answers for what it kept.
func TestCells(t *testing.T) {
	t.Parallel()
	b := setup(t, sessionhost.Config{Worker: "w"})
	ctx := t.Context()
	s, err := b.client.Create(ctx, sessions.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.client.Cells(ctx, s.ID); err != nil || len(got.Cells) != 0 || got.Cells == nil {
		t.Fatalf("a new session's cells: %+v, %v: want none, as []", got, err)
	}
	for _, code := range []string{"x = 1", "png 30 20", "raise", "<script>alert(1)</script>"} {
		if _, err := b.client.RunCode(ctx, s.ID, "", sessionapi.CodeRequest{Code: code}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := b.client.Cells(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Cells) != 4 || got.Dropped != 0 {
		t.Fatalf("%d cells, %d dropped: want 4 and none", len(got.Cells), got.Dropped)
	}
	for i, c := range got.Cells {
		if c.Seq != int64(i+1) || c.At.IsZero() || c.DurationMS != 3 {
			t.Errorf("cell %d: seq %d at %v, %d ms", i, c.Seq, c.At, c.DurationMS)
		}
	}
	if c := got.Cells[1]; c.Code != "png 30 20" || len(c.Display) != 1 || c.Display[0].Width != 30 || c.Display[0].Height != 20 {
		t.Errorf("the figure's cell: %+v", c)
	}
	if c := got.Cells[2]; c.Error == nil || c.Error.Name != "ValueError" || c.Text != "" {
		t.Errorf("the raising cell: %+v", c)
	}
	if c := got.Cells[3]; c.Text != "<script>alert(1)</script>" {
		t.Errorf("the last cell's value %q", c.Text)
	}
	if _, err := b.client.As("mallory").Cells(ctx, s.ID); !errors.Is(err, sessionapi.ErrNotFound) {
		t.Errorf("another owner's read: %v, want not found", err)
	}
	if _, err := b.client.Cells(ctx, "s-none"); !errors.Is(err, sessionapi.ErrNotFound) {
		t.Errorf("an unknown session's: %v, want not found", err)
	}

	if _, err := b.client.Delete(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.RunCode(ctx, s.ID, "", sessionapi.CodeRequest{Code: "1"}); !errors.Is(err, sessionapi.ErrGone) {
		t.Fatalf("a cell after the end: %v, want gone", err)
	}
	ended, err := b.client.Cells(ctx, s.ID)
	if err != nil || len(ended.Cells) != 4 || !strings.HasPrefix(ended.Cells[1].Display[0].Data, "iVBORw0KGgo") {
		t.Fatalf("after the end: %v, %v: want the 4 cells kept", ended, err)
	}
	if _, err := b.client.As("mallory").Cells(ctx, s.ID); !errors.Is(err, sessionapi.ErrNotFound) {
		t.Errorf("another owner's read after the end: %v, want not found", err)
	}

	// A session that ran no cell leaves no history: gone.
	e, err := b.client.Create(ctx, sessions.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Delete(ctx, e.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Cells(ctx, e.ID); !errors.Is(err, sessionapi.ErrGone) {
		t.Errorf("an ended session without cells: %v, want gone", err)
	}
}

// Reading a session's cells is no call of it: a session read all along
// still ends at its idle timeout.
func TestCellsAreNoCall(t *testing.T) {
	t.Parallel()
	b := setup(t, sessionhost.Config{Worker: "w"})
	ctx := t.Context()
	s, err := b.client.Create(ctx, sessions.Spec{IdleTimeout: limits.Duration(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.RunCode(ctx, s.ID, "", sessionapi.CodeRequest{Code: "1"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "the session idle while its cells are read", func() bool {
		if _, err := b.client.Cells(ctx, s.ID); err != nil {
			t.Fatalf("a read of the cells: %v", err)
		}
		info, err := b.client.Get(ctx, s.ID)
		return err == nil && info.Status == sessions.StatusEnded && info.EndReason == sessions.EndIdle
	})
}

// One owner's ended sessions do not evict another's histories: mallory,
// who makes and deletes more sessions than a worker keeps the histories
// of, loses her own oldest, and alice's deleted session still shows what
// it ran.
func TestEndedCellsKeptPerOwner(t *testing.T) {
	t.Parallel()
	b := setup(t, sessionhost.Config{Worker: "w"})
	ctx := t.Context()
	s, err := b.client.Create(ctx, sessions.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.RunCode(ctx, s.ID, "", sessionapi.CodeRequest{Code: "alice's"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Delete(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	mallory := b.client.As("mallory")
	var last string
	for range 20 {
		m, err := mallory.Create(ctx, sessions.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		<-b.boxes // the fake's sandboxes, held by the harness
		if _, err := mallory.RunCode(ctx, m.ID, "", sessionapi.CodeRequest{Code: "evict"}); err != nil {
			t.Fatal(err)
		}
		if _, err := mallory.Delete(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
		last = m.ID
	}
	got, err := b.client.Cells(ctx, s.ID)
	if err != nil || len(got.Cells) != 1 || got.Cells[0].Code != "alice's" {
		t.Fatalf("alice's ended session after mallory's: %+v, %v: want its cell kept", got, err)
	}
	if got, err := mallory.Cells(ctx, last); err != nil || len(got.Cells) != 1 {
		t.Errorf("mallory's last ended session: %+v, %v: want its cell kept", got, err)
	}
}
