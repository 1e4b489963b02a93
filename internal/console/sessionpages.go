package console

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	fleetsessions "github.com/sandfleet/sandfleet/pkg/sessions"
)

// The sessions' pages: the viewer's sessions (their owner is the
// viewer's token), and one session's record, processes and terminal. The
// terminal is term.js (static/term.min.js, MIT, as Debian's libjs-term.js
// ships it; Debian's libjs-xterm is a stub that needs a bundler) on the
// API's WebSocket (GET /v1/sessions/{id}/pty), which the login cookie
// opens from the console's own origin.

// sessionsOf is the viewer's sessions client, or nil where the gateway
// serves none.
func (c *Console) sessionsOf(s *session) *fleetsessions.Client {
	if c.cfg.Sessions == nil {
		return nil
	}
	return c.cfg.Sessions(s.viewer)
}

// sessionRow is a session and the processes it runs (-1: unknown).
type sessionRow struct {
	fleetsessions.Info
	Processes int
}

// sessionListPage: GET /sessions.
type sessionListPage struct {
	Rows      []sessionRow
	NotServed bool
}

func (sessionListPage) frame() frame { return frame{"Sessions", "sessions", 10} }

// processes counts each running session's background processes, a few
// sessions at a time, each under a short deadline: a session whose
// worker is slow shows "—" rather than holding the page.
func processes(ctx context.Context, client *fleetsessions.Client, rows []sessionRow) {
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range rows {
		rows[i].Processes = -1
		if rows[i].Status != fleetsessions.StatusRunning {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if ps, err := client.Processes(cctx, rows[i].ID); err == nil {
				rows[i].Processes = len(ps)
			}
		})
	}
	wg.Wait()
}

func (c *Console) sessionList(w http.ResponseWriter, r *http.Request, s *session) error {
	client := c.sessionsOf(s)
	if client == nil {
		c.render(w, http.StatusOK, "sessions", s, sessionListPage{NotServed: true})
		return nil
	}
	ctx, cancel := pageCtx(r)
	defer cancel()
	list, err := client.List(ctx)
	if err != nil {
		return err
	}
	rows := make([]sessionRow, 0, min(len(list), c.cfg.PageSize))
	for _, info := range list[:min(len(list), c.cfg.PageSize)] {
		rows = append(rows, sessionRow{Info: info})
	}
	processes(ctx, client, rows)
	c.render(w, http.StatusOK, "sessions", s, sessionListPage{Rows: rows})
	return nil
}

// sessionPage: GET /sessions/{id}.
type sessionPage struct {
	fleetsessions.Info
	Procs       []sessionapi.Process
	ProcsErr    string
	CanTerminal bool // the viewer may write, and the session runs
	History     cellsView
}

func (p sessionPage) frame() frame { return frame{"Session " + p.ID, "sessions", 0} }

func (c *Console) sessionDetail(w http.ResponseWriter, r *http.Request, s *session) error {
	client := c.sessionsOf(s)
	if client == nil {
		return notFound("this gateway serves no sessions")
	}
	ctx, cancel := pageCtx(r)
	defer cancel()
	info, err := client.Get(ctx, r.PathValue("id"))
	if errors.Is(err, sessionapi.ErrNotFound) {
		return notFound("no session %q (never made, another token's, or expired)", r.PathValue("id"))
	}
	if err != nil {
		return err
	}
	p := sessionPage{Info: *info, CanTerminal: s.viewer.CanCancel && info.Status == fleetsessions.StatusRunning}
	if info.Status == fleetsessions.StatusRunning {
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
		p.Procs, err = client.Processes(pctx, info.ID)
		pcancel()
		if err != nil {
			p.ProcsErr = err.Error()
		}
	}
	p.History = cellsOf(ctx, client, info.ID)
	c.render(w, http.StatusOK, "session", s, p)
	return nil
}
