package gateway

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// ExposeRequest is POST /v1/sessions/{id}/ports's body.
type ExposeRequest struct {
	Port int `json:"port"`
	// TTL is how long the preview token lasts ("30m"); default 1h.
	TTL string `json:"ttl,omitempty"`
	// Wait, if set ("10s", at most MaxExposeWait), holds the answer until
	// the port accepts a connection: 504 gateway_timeout if it does not
	// within that time.
	Wait string `json:"wait,omitempty"`
}

// MaxExposeWait bounds an expose's wait for its port to accept.
const MaxExposeWait = 2 * time.Minute

// exposeRetry is how often an expose's wait tries its port again.
const exposeRetry = 100 * time.Millisecond

func (g *Gateway) exposePort(w http.ResponseWriter, r *http.Request, tok *Token) error {
	c, err := g.sessionsOf(tok)
	if err != nil {
		return err
	}
	var req ExposeRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	var wait time.Duration
	if req.Wait != "" {
		wait, err = time.ParseDuration(req.Wait)
		if err != nil || wait <= 0 || wait > MaxExposeWait {
			return apiErr(http.StatusBadRequest, CodeInvalidRequest, "wait %q: a duration up to %s", req.Wait, MaxExposeWait)
		}
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + g.cfg.WriteTimeout))
	}
	info, err := g.expose(r.Context(), c, g.views.of(tok).Tenant(), tokenName(tok), r.PathValue("id"), req.Port, req.TTL, wait)
	if err != nil {
		return err
	}
	info.URL = portURL(r, r.PathValue("id"), req.Port)
	writeJSON(w, http.StatusCreated, info)
	return nil
}

// expose exposes port of session id as c (of tenant and owner), waits up
// to wait for it to accept a connection, and signs a preview token of
// that exposure for ttl ("": DefaultPreviewTTL). The answer has no URL:
// where it is reached depends on the host the caller came to.
func (g *Gateway) expose(ctx context.Context, c *sessions.Client, tenant, owner, id string, port int, ttl string, wait time.Duration) (PortInfo, error) {
	life := DefaultPreviewTTL
	if ttl != "" {
		d, err := time.ParseDuration(ttl)
		if err != nil || d <= 0 || d > MaxPreviewTTL {
			return PortInfo{}, apiErr(http.StatusBadRequest, CodeInvalidRequest, "ttl %q: a duration up to %s", ttl, MaxPreviewTTL)
		}
		life = d
	}
	if err := sessions.ValidPort(port); err != nil {
		return PortInfo{}, g.sessionErr(err)
	}
	if _, err := c.Expose(ctx, id, port); err != nil {
		return PortInfo{}, g.sessionErr(err)
	}
	// The exposure the token is for: the record's, read after the expose
	// (a host of an earlier version numbers none: 0, any exposure).
	rec, err := c.Get(ctx, id)
	if err != nil {
		return PortInfo{}, g.sessionErr(err)
	}
	if wait > 0 {
		if err := g.waitPort(ctx, c, id, port, wait); err != nil {
			return PortInfo{}, err
		}
	}
	exp := time.Now().Add(life).UTC().Truncate(time.Second)
	t := g.signPreview(previewClaims{Session: id, Port: port, Tenant: tenant, Owner: owner, Expires: exp.Unix(), Exposure: rec.PortExposure[port]})
	return PortInfo{Port: port, Token: t, ExpiresAt: &exp}, nil
}

// waitPort waits until port of session id accepts a connection (one is
// opened and closed at once), trying again every exposeRetry while the
// agent says nothing listens, for wait at most.
func (g *Gateway) waitPort(ctx context.Context, c *sessions.Client, id string, port int, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		conn, err := c.OpenConn(ctx, id, port)
		if err == nil {
			conn.Close()
			return nil
		}
		if e := sessionapi.AsError(err); e != nil && !errors.Is(e, sessionapi.ErrFailed) {
			return g.sessionErr(err)
		}
		t := time.NewTimer(exposeRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return apiErr(http.StatusGatewayTimeout, CodeGatewayTimeout, "port %d of session %s accepted no connection within %s: is its server listening on 127.0.0.1?", port, id, wait)
		case <-t.C:
		}
	}
}
