package gateway

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// Sessions over HTTP: each route is one call of pkg/sessions' client, as
// the token's owner. A session is its token's: another token's, like one
// that does not exist, is 404.

// sessionsOf is the sessions client of the token's view, or 501 where the
// gateway serves none.
func (g *Gateway) sessionsOf(tok *Token) (*sessions.Client, error) {
	if c := g.views.of(tok).sessions; c != nil {
		return c, nil
	}
	return nil, apiErr(http.StatusNotImplemented, CodeNotImplemented, "this gateway serves no sessions")
}

// sessionStatus is the HTTP answer of each of a session's error codes
// (sessionapi.Codes, every one of which it names); ErrCap's depends on
// the cap (sessionErr).
var sessionStatus = map[string]struct {
	status int
	code   Code
}{
	sessionapi.ErrNotFound.Code: {http.StatusNotFound, CodeNotFound},
	sessionapi.ErrGone.Code:     {http.StatusGone, CodeGone},
	sessionapi.ErrCap.Code:      {http.StatusTooManyRequests, CodeSessionCap},
	sessionapi.ErrFull.Code:     {http.StatusTooManyRequests, CodeTooManyRequests},
	sessionapi.ErrLimit.Code:    {http.StatusTooManyRequests, CodeTooManyRequests},
	sessionapi.ErrInvalid.Code:  {http.StatusBadRequest, CodeInvalidRequest},
	sessionapi.ErrExists.Code:   {http.StatusConflict, CodeExists},
	sessionapi.ErrPaused.Code:   {http.StatusConflict, CodePaused},
	sessionapi.ErrFailed.Code:   {http.StatusUnprocessableEntity, CodeFailed},
}

// sessionErr maps a session's error to its answer; a code this gateway
// does not know (a newer worker's) is a failed call.
func (g *Gateway) sessionErr(err error) error {
	e := sessionapi.AsError(err)
	if e == nil {
		return err
	}
	m, ok := sessionStatus[e.Code]
	if !ok {
		m = sessionStatus[sessionapi.ErrFailed.Code]
	}
	// A count's cap holds until one of the caller's sessions ends; an
	// ask over a lifetime's cap is wrong whenever it is sent.
	if e.Code == sessionapi.ErrCap.Code && (e.Cap == sessionapi.CapMaxLifetime || e.Cap == sessionapi.CapIdleTimeout) {
		m.status = http.StatusBadRequest
	}
	ae := apiErr(m.status, m.code, "%s", e.Message)
	ae.Cap = e.Cap
	if m.code == CodeTooManyRequests {
		ae.RetryAfter = g.cfg.RetryAfter
	}
	return ae
}

// decodeBody reads a JSON body into v, refusing unknown fields.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return apiErr(http.StatusBadRequest, CodeInvalidJSON, "the body must be one JSON object: %v", err)
	}
	return nil
}

func (g *Gateway) createSession(w http.ResponseWriter, r *http.Request, tok *Token) error {
	c, err := g.sessionsOf(tok)
	if err != nil {
		return err
	}
	var spec sessions.Spec
	if err := decodeBody(r, &spec); err != nil {
		return err
	}
	if spec.From != nil || spec.Tenant != "" {
		return apiErr(http.StatusBadRequest, CodeUnknownField, "from and tenant are not fields of a create (POST .../resume and .../fork start a session from another)")
	}
	// A tenant's session names its tenant's workspaces.
	if tok != nil {
		spec.Tenant = tok.Tenant
	}
	info, err := c.Create(r.Context(), spec)
	if err != nil {
		return g.sessionErr(err)
	}
	g.log.Info("session created", "session_id", info.ID, "worker", info.Worker, "token", tokenName(tok))
	w.Header().Set("Location", "/v1/sessions/"+info.ID)
	writeJSON(w, http.StatusCreated, info)
	return nil
}

// SessionList is the answer of GET /v1/sessions.
type SessionList struct {
	Sessions []sessions.Info `json:"sessions"`
}

func (g *Gateway) listSessions(w http.ResponseWriter, r *http.Request, tok *Token) error {
	c, err := g.sessionsOf(tok)
	if err != nil {
		return err
	}
	list, err := c.List(r.Context())
	if err != nil {
		return g.sessionErr(err)
	}
	if list == nil {
		list = []sessions.Info{}
	}
	writeJSON(w, http.StatusOK, SessionList{Sessions: list})
	return nil
}

func (g *Gateway) getSession(w http.ResponseWriter, r *http.Request, tok *Token) error {
	c, err := g.sessionsOf(tok)
	if err != nil {
		return err
	}
	info, err := c.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return g.sessionErr(err)
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

// sessionCall is a route that makes one call on the path's session.
func (g *Gateway) sessionCall(w http.ResponseWriter, r *http.Request, tok *Token, op string, body, out any, wait time.Duration) error {
	c, err := g.sessionsOf(tok)
	if err != nil {
		return err
	}
	if wait > 0 {
		// A call that waits holds the request: a waiting slot.
		release, err := g.take(g.waiting, tok)
		if err != nil {
			return err
		}
		defer release()
	}
	// The answer's write deadline is past the call's own timeout.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + g.cfg.WriteTimeout + 30*time.Second))
	err = c.Do(r.Context(), r.PathValue("id"), op, r.Header.Get("Idempotency-Key"), body, out, wait)
	if err != nil {
		return g.sessionErr(err)
	}
	return nil
}

func (g *Gateway) deleteSession(w http.ResponseWriter, r *http.Request, tok *Token) error {
	var info sessions.Info
	if err := g.sessionCall(w, r, tok, sessionapi.OpDelete, nil, &info, 0); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, &info)
	return nil
}

func (g *Gateway) keepaliveSession(w http.ResponseWriter, r *http.Request, tok *Token) error {
	var info sessions.Info
	if err := g.sessionCall(w, r, tok, sessionapi.OpKeepalive, nil, &info, 0); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, &info)
	return nil
}

// setSessionNetwork replaces a running session's egress policy: the body
// is a limits.network value, checked by the session's worker.
func (g *Gateway) setSessionNetwork(w http.ResponseWriter, r *http.Request, tok *Token) error {
	var n limits.Network
	if err := decodeBody(r, &n); err != nil {
		return err
	}
	var info sessions.Info
	if err := g.sessionCall(w, r, tok, sessionapi.OpNetwork, &n, &info, 0); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, &info)
	return nil
}

func (g *Gateway) pauseSession(w http.ResponseWriter, r *http.Request, tok *Token) error {
	var info sessions.Info
	if err := g.sessionCall(w, r, tok, sessionapi.OpPause, nil, &info, 0); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, &info)
	return nil
}

func (g *Gateway) resumeSession(w http.ResponseWriter, r *http.Request, tok *Token) error {
	c, err := g.sessionsOf(tok)
	if err != nil {
		return err
	}
	info, err := c.Resume(r.Context(), r.PathValue("id"))
	if err != nil {
		return g.sessionErr(err)
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

func (g *Gateway) forkSession(w http.ResponseWriter, r *http.Request, tok *Token) error {
	c, err := g.sessionsOf(tok)
	if err != nil {
		return err
	}
	var req sessions.ForkRequest
	if r.ContentLength != 0 {
		if err := decodeBody(r, &req); err != nil {
			return err
		}
	}
	info, err := c.Fork(r.Context(), r.PathValue("id"), req)
	if err != nil {
		return g.sessionErr(err)
	}
	g.log.Info("session forked", "session_id", info.ID, "from", r.PathValue("id"), "worker", info.Worker, "token", tokenName(tok))
	w.Header().Set("Location", "/v1/sessions/"+info.ID)
	writeJSON(w, http.StatusCreated, info)
	return nil
}

// callWait is how long a call may take: its timeout, or the default
// cap of a timeout when it names none (the worker's limits.timeout of
// the session applies, which is at most its cap).
func callWait(asked limits.Duration) time.Duration {
	if asked > 0 {
		return asked.D()
	}
	return limits.DefaultCaps().Timeout.D()
}

func (g *Gateway) execSession(w http.ResponseWriter, r *http.Request, tok *Token) error {
	var req sessionapi.ExecRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	var res sessionapi.ExecResult
	if err := g.sessionCall(w, r, tok, sessionapi.OpExec, req, &res, callWait(req.Timeout)); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, &res)
	return nil
}

func (g *Gateway) codeSession(w http.ResponseWriter, r *http.Request, tok *Token) error {
	var req sessionapi.CodeRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	var res sessions.CodeResult
	if err := g.sessionCall(w, r, tok, sessionapi.OpCode, req, &res, callWait(req.Timeout)); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, &res)
	return nil
}

// ProcessList is the answer of GET /v1/sessions/{id}/processes.
type ProcessList struct {
	Processes []sessionapi.Process `json:"processes"`
}

func (g *Gateway) listProcesses(w http.ResponseWriter, r *http.Request, tok *Token) error {
	var ps []sessionapi.Process
	if err := g.sessionCall(w, r, tok, sessionapi.OpProcesses, nil, &ps, 0); err != nil {
		return err
	}
	if ps == nil {
		ps = []sessionapi.Process{}
	}
	writeJSON(w, http.StatusOK, ProcessList{Processes: ps})
	return nil
}

// listCells answers the session's recent cells, as its worker keeps them
// (an ended session's for a while after its end). It resumes nothing: a
// read is no call of the session.
func (g *Gateway) listCells(w http.ResponseWriter, r *http.Request, tok *Token) error {
	c, err := g.sessionsOf(tok)
	if err != nil {
		return err
	}
	cells, err := c.Cells(r.Context(), r.PathValue("id"))
	if err != nil {
		return g.sessionErr(err)
	}
	writeJSON(w, http.StatusOK, cells)
	return nil
}

func pathPID(r *http.Request) (int, error) {
	pid, err := strconv.Atoi(r.PathValue("pid"))
	if err != nil || pid <= 0 {
		return 0, apiErr(http.StatusNotFound, CodeNotFound, "no process %q", r.PathValue("pid"))
	}
	return pid, nil
}

func (g *Gateway) readProcess(w http.ResponseWriter, r *http.Request, tok *Token) error {
	pid, err := pathPID(r)
	if err != nil {
		return err
	}
	req := sessionapi.ProcessRequest{PID: pid}
	q := r.URL.Query()
	if v := q.Get("since"); v != "" {
		if req.Since, err = strconv.ParseInt(v, 10, 64); err != nil || req.Since < 0 {
			return apiErr(http.StatusBadRequest, CodeInvalidRequest, "since: %q is no offset", v)
		}
	}
	if req.Wait, err = g.waitDuration(r); err != nil {
		return err
	}
	var out sessionapi.ProcessOutput
	if err := g.sessionCall(w, r, tok, sessionapi.OpProcess, req, &out, req.Wait.D()); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, &out)
	return nil
}

// waitDuration reads ?wait= as a limits.Duration (shortened to MaxWait).
func (g *Gateway) waitDuration(r *http.Request) (limits.Duration, error) {
	d, err := g.waitParam(r)
	return limits.Duration(d), err
}

func (g *Gateway) signalProcess(w http.ResponseWriter, r *http.Request, tok *Token) error {
	pid, err := pathPID(r)
	if err != nil {
		return err
	}
	req := sessionapi.SignalRequest{PID: pid}
	if r.ContentLength != 0 {
		var body struct {
			Signal int `json:"signal"`
		}
		if err := decodeBody(r, &body); err != nil {
			return err
		}
		req.Signal = body.Signal
	}
	if err := g.sessionCall(w, r, tok, sessionapi.OpSignal, req, nil, 0); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct{}{})
	return nil
}

func (g *Gateway) stdinProcess(w http.ResponseWriter, r *http.Request, tok *Token) error {
	pid, err := pathPID(r)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	req := sessionapi.StdinRequest{PID: pid, Data: data, EOF: r.URL.Query().Get("eof") == "true"}
	if err := g.sessionCall(w, r, tok, sessionapi.OpStdin, req, nil, 0); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct{}{})
	return nil
}

// EntryList is the answer of GET /v1/sessions/{id}/files.
type EntryList struct {
	Entries []sessionapi.Entry `json:"entries"`
}

func (g *Gateway) listFiles(w http.ResponseWriter, r *http.Request, tok *Token) error {
	dir := r.URL.Query().Get("dir")
	if dir == "" {
		dir = "."
	}
	var res sessionapi.FileResult
	if err := g.sessionCall(w, r, tok, sessionapi.OpList, sessionapi.FileRequest{Path: dir}, &res, 0); err != nil {
		return err
	}
	if res.Entries == nil {
		res.Entries = []sessionapi.Entry{}
	}
	writeJSON(w, http.StatusOK, EntryList{Entries: res.Entries})
	return nil
}

func (g *Gateway) readFile(w http.ResponseWriter, r *http.Request, tok *Token) error {
	c, err := g.sessionsOf(tok)
	if err != nil {
		return err
	}
	id, path := r.PathValue("id"), r.PathValue("path")
	// The first chunk decides the answer: an error is still a JSON one.
	var first sessionapi.FileResult
	if err := c.Do(r.Context(), id, sessionapi.OpRead, "", sessionapi.FileRequest{Path: path, Length: sessionapi.MaxFileChunk}, &first, 0); err != nil {
		return g.sessionErr(err)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(g.cfg.WriteTimeout))
	if _, err := w.Write(first.Data); err != nil || first.EOF {
		return nil
	}
	off := int64(len(first.Data))
	for {
		var res sessionapi.FileResult
		if err := c.Do(r.Context(), id, sessionapi.OpRead, "", sessionapi.FileRequest{Path: path, Offset: off, Length: sessionapi.MaxFileChunk}, &res, 0); err != nil {
			// Mid-stream: the status is sent; cut the body so the client
			// sees a short read, not a whole file.
			panic(http.ErrAbortHandler)
		}
		_ = rc.SetWriteDeadline(time.Now().Add(g.cfg.WriteTimeout))
		if _, err := w.Write(res.Data); err != nil {
			return nil
		}
		off += int64(len(res.Data))
		if res.EOF || len(res.Data) == 0 {
			return nil
		}
	}
}

func (g *Gateway) writeFile(w http.ResponseWriter, r *http.Request, tok *Token) error {
	c, err := g.sessionsOf(tok)
	if err != nil {
		return err
	}
	var mode uint32
	if v := r.URL.Query().Get("mode"); v != "" {
		m, err := strconv.ParseUint(v, 8, 32)
		if err != nil || m > 0o777 {
			return apiErr(http.StatusBadRequest, CodeInvalidRequest, "mode: %q is no octal permission (such as 644)", v)
		}
		mode = uint32(m)
	}
	entry, err := c.WriteFile(r.Context(), r.PathValue("id"), r.Header.Get("Idempotency-Key"), r.PathValue("path"), mode, r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return g.sessionErr(err)
	}
	writeJSON(w, http.StatusOK, entry)
	return nil
}

func (g *Gateway) removeFile(w http.ResponseWriter, r *http.Request, tok *Token) error {
	req := sessionapi.FileRequest{Path: r.PathValue("path"), Recursive: r.URL.Query().Get("recursive") == "true"}
	if err := g.sessionCall(w, r, tok, sessionapi.OpRemove, req, nil, 0); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
