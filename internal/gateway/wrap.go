package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/sandfleet/sandfleet/internal/shorten"
	"github.com/sandfleet/sandfleet/internal/webauth"
)

// wrap applies what every request gets, in one place: body cap and read
// deadline, write deadline, authentication, metrics, panic recovery, and
// the JSON error answer.
func (g *Gateway) wrap(rt route) http.Handler {
	name := rt.pattern
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		g.metrics.inflight.Inc()
		defer func() {
			g.metrics.inflight.Dec()
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				g.log.Error("handler panicked", "route", name, "panic", p, "stack", string(debug.Stack()))
				if !rec.wrote {
					g.writeError(rec, r, errors.New("panic"))
				}
			}
			g.metrics.observe(name, rec.status, time.Since(start))
		}()
		if err := g.screen(rec, r, rt, start); err != nil {
			g.writeError(rec, r, err)
			return
		}
		var tok *Token
		if !rt.routing {
			var err error
			if tok, err = g.authenticate(r, rt); err != nil {
				g.writeError(rec, r, err)
				return
			}
		}
		if err := rt.h(rec, r, tok); err != nil {
			// A stream already under way said so itself; a client that
			// left hears nothing.
			if rec.wrote || (r.Context().Err() != nil && errors.Is(err, context.Canceled)) {
				g.log.Debug("request ended", "route", name, "err", err)
				return
			}
			g.writeError(rec, r, err)
		}
	})
}

// screen sets the request's deadlines and caps its body, and refuses what
// an open gateway must not answer, before any token is looked at.
func (g *Gateway) screen(w http.ResponseWriter, r *http.Request, rt route, start time.Time) error {
	rc := http.NewResponseController(w)
	if !rt.stream {
		wd := g.cfg.WriteTimeout
		if rt.long {
			wd += g.cfg.MaxWait
		}
		_ = rc.SetWriteDeadline(start.Add(wd))
	}
	if g.cfg.Tokens.Len() == 0 {
		if err := openRefusal(r); err != nil {
			return err
		}
	}
	if rt.routing {
		return nil
	}
	if r.ContentLength > rt.body {
		return &http.MaxBytesError{Limit: rt.body}
	}
	if r.ContentLength != 0 { // a body, or one of unknown length
		// The deadline covers the body only: left in place, it would
		// end a long poll when the server reads the idle connection.
		_ = rc.SetReadDeadline(start.Add(g.cfg.ReadTimeout))
		r.Body = &bodyReader{ReadCloser: http.MaxBytesReader(w, r.Body, rt.body), rc: rc}
	}
	return nil
}

// openRefusal is why an open gateway (no tokens) refuses r, or nil. It
// listens on loopback only, but a page in the viewer's browser can reach
// loopback too: a Host that is no loopback name is a DNS rebinding, and a
// write another site sent (Origin, Sec-Fetch-Site) a forged request.
func openRefusal(r *http.Request) error {
	switch {
	case !webauth.LoopbackHost(r.Host):
		return apiErr(http.StatusForbidden, CodeForbidden, "an open gateway (no tokens) answers on loopback names only, not %q", shorten.Text(r.Host, 100))
	case r.Method != http.MethodGet && r.Method != http.MethodHead && !webauth.SameOrigin(r):
		return apiErr(http.StatusForbidden, CodeForbidden, "an open gateway (no tokens) refuses writes another site sent")
	}
	return nil
}

// authenticate returns the token r carries, nil for an open route or an
// open gateway, or the 401 or 403 it gets.
func (g *Gateway) authenticate(r *http.Request, rt route) (*Token, error) {
	if rt.open || g.cfg.Tokens.Len() == 0 {
		return nil, nil
	}
	secret := webauth.Bearer(r.Header.Get("Authorization"))
	if secret == "" && g.console != nil && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		// The console's login cookie, for what its pages read
		// without a header of their own (EventSource, downloads).
		// Never for a route that writes: a cookie travels with
		// requests the viewer did not make.
		secret = g.console.LoginSecret(r)
	}
	tok := g.cfg.Tokens.Lookup(secret)
	if tok == nil {
		msg := "a bearer token is required (Authorization: Bearer <token>)"
		if secret != "" {
			msg = "the bearer token is not valid"
		}
		return nil, apiErr(http.StatusUnauthorized, CodeUnauthorized, "%s", msg)
	}
	if rt.write && !tok.CanWrite() {
		return nil, apiErr(http.StatusForbidden, CodeForbidden, "token %q is read-only (role=read)", tok.Name)
	}
	return tok, nil
}

// bodyReader clears the read deadline once the whole body is read. After
// any other error it stays: the server then gives up on the rest of the
// body rather than wait for it without a deadline.
type bodyReader struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// recorder notes the status for metrics and whether anything was written.
type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if !r.wrote {
		r.status, r.wrote = http.StatusOK, true
	}
	return r.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection's deadlines
// and Flush.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
