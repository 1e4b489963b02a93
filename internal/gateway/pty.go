package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"github.com/sandfleet/sandfleet/internal/webauth"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// A session's terminal over a WebSocket: GET /v1/sessions/{id}/pty
// (?cols=&rows=, default 80x24) upgrades, and then
//
//	binary frames, both ways    the terminal's bytes: typed in, output out
//	text frame, client → server {"cols": N, "rows": N}: a resize
//	text frame, server → client {"exit_code": N} or {"reason": "..."}: its
//	                            end, then a normal close
//
// It takes a slot of MaxTerminals (and of the token's and tenant's
// share) for as long as it is open. A browser's page reaches it with the
// console's login cookie, as its other GETs, but only from the
// gateway's own origin: a WebSocket is not bound by the same-origin
// rule, so a page of another site could otherwise open a shell with the
// viewer's cookie.
//
// The library is github.com/coder/websocket: no dependencies, each read
// and write under a context, concurrent writers safe, and kept (it is
// what nhooyr/websocket became).

// maxWSMessage bounds a frame from the client; the terminal takes it
// in pieces of sessions.MaxPTYInput.
const maxWSMessage = 1 << 20

func (g *Gateway) ptySession(w http.ResponseWriter, r *http.Request, tok *Token) error {
	if !webauth.SameOrigin(r) {
		return apiErr(http.StatusForbidden, CodeForbidden, "a terminal opens from this gateway's own pages only")
	}
	c, err := g.sessionsOf(tok)
	if err != nil {
		return err
	}
	size := func(name string, def int) (int, error) {
		v := r.URL.Query().Get(name)
		if v == "" {
			return def, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			return 0, apiErr(http.StatusBadRequest, CodeInvalidRequest, "%s=%q: a number from 1 to 10000", name, v)
		}
		return n, nil
	}
	cols, err := size("cols", 80)
	if err != nil {
		return err
	}
	rows, err := size("rows", 24)
	if err != nil {
		return err
	}
	release, err := g.take(g.ptys, tok)
	if err != nil {
		return err
	}
	defer release()
	p, err := c.OpenPTY(r.Context(), r.PathValue("id"), sessions.PTYRequest{Cols: cols, Rows: rows})
	if err != nil {
		return g.sessionErr(err)
	}
	defer p.Close()
	// The connection is the terminal's now: no deadline of the request
	// applies to it (each write has its own below).
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	conn, err := websocket.Accept(w, r, nil) // the default: same origin only
	if err != nil {
		return nil // Accept answered
	}
	conn.SetReadLimit(maxWSMessage)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		defer cancel()
		for {
			typ, data, err := conn.Read(ctx)
			if err != nil {
				return
			}
			switch typ {
			case websocket.MessageBinary:
				_, err = p.Write(data)
			case websocket.MessageText:
				var sz sessions.PTYSize
				if json.Unmarshal(data, &sz) != nil || sz.Cols < 1 || sz.Rows < 1 || sz.Cols > 10000 || sz.Rows > 10000 {
					_ = conn.Close(websocket.StatusUnsupportedData, `a text frame is a resize: {"cols": N, "rows": N}`)
					return
				}
				err = p.Resize(sz.Cols, sz.Rows)
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		data, err := p.Read(ctx)
		if errors.Is(err, io.EOF) {
			end, _ := json.Marshal(p.Exit())
			wctx, wcancel := context.WithTimeout(ctx, g.cfg.WriteTimeout)
			_ = conn.Write(wctx, websocket.MessageText, end)
			wcancel()
			_ = conn.Close(websocket.StatusNormalClosure, "")
			return nil
		}
		if err != nil {
			_ = conn.Close(websocket.StatusGoingAway, "")
			return nil
		}
		wctx, wcancel := context.WithTimeout(ctx, g.cfg.WriteTimeout)
		err = conn.Write(wctx, websocket.MessageBinary, data)
		wcancel()
		if err != nil {
			return nil // the client left, or stopped reading
		}
	}
}
