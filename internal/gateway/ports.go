package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/sandfleet/sandfleet/internal/webauth"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// A session's ports: a server the session runs on its sandbox's loopback,
// exposed by its owner (POST /v1/sessions/{id}/ports) and reached at
//
//	/v1/sessions/{id}/ports/{port}/...
//
// by a reverse proxy whose connections are the session's own
// (sessions.Conn: through the session's worker to the agent in the
// sandbox, which dials 127.0.0.1:port). Nothing is opened on the
// sandbox's network, and nothing is published on any host.
//
// Who may: the owner's token (Authorization), or a preview token the
// expose call gave (X-Sandfleet-Preview-Token, or ?sandfleet_preview=),
// signed by the gateway and good for one session, one port, until it
// expires. Anything else, another tenant's token or a token of another
// session's or port's, is 404 as for a session that does not exist.
//
// The pages a session serves come from the gateway's own origin, so
// they are kept from acting on it: every response is a sandboxed
// document (Content-Security-Policy: sandbox, an origin of its own), its
// headers that act on the whole origin (Set-Cookie, Clear-Site-Data,
// Strict-Transport-Security, ...) are dropped, and the request's credentials (the
// Authorization header, the cookies, the preview token) are not passed
// on to the session's server.

// portPath is the route of a session's port, any method.
const portPath = "/v1/sessions/{id}/ports/{port}/{rest...}"

// previewHeader and previewQuery carry a preview token.
const (
	previewHeader = "X-Sandfleet-Preview-Token"
	previewQuery  = "sandfleet_preview"
)

// Preview tokens last DefaultPreviewTTL unless the expose asks for
// another ttl, at most MaxPreviewTTL.
const (
	DefaultPreviewTTL = time.Hour
	MaxPreviewTTL     = 7 * 24 * time.Hour
)

// portCSP makes every page of a session's server a sandboxed document.
const portCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// originHeaders act on the whole origin (or site) of the URL they come
// from, beyond the sandboxed page: the gateway's, for a session's server.
// They are dropped from its responses.
var originHeaders = []string{
	"Set-Cookie",                // a cookie of the gateway's origin
	"Clear-Site-Data",           // logs the viewer out of the console, clears its storage
	"Strict-Transport-Security", // pins the gateway's host (and its subdomains) to HTTPS
	"Alt-Svc",                   // sends the origin's next requests to another endpoint
	"Service-Worker-Allowed",    // widens a service worker's scope
}

// PortInfo is an exposed port: where it is reached, and, from an
// expose, a preview token for it and when that expires.
type PortInfo struct {
	Port      int        `json:"port"`
	URL       string     `json:"url"`
	Token     string     `json:"token,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// previewClaims is what a preview token says, signed.
type previewClaims struct {
	Session string `json:"s"`
	Port    int    `json:"p"`
	Tenant  string `json:"t,omitempty"`
	Owner   string `json:"o"`
	Expires int64  `json:"e"` // Unix seconds
	// Exposure is the port's exposure the token was made for
	// (sessions.Info.PortExposure): once the port is unexposed, the
	// token is good no more, even when the port is exposed again.
	Exposure int `json:"x,omitempty"`
}

func newPreviewKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}

func (g *Gateway) signPreview(c previewClaims) string {
	body, _ := json.Marshal(c)
	m := hmac.New(sha256.New, g.previewKey)
	m.Write([]byte("sandfleet preview\n"))
	m.Write(body)
	return base64.RawURLEncoding.EncodeToString(body) + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// openPreview returns the claims of a token the gateway signed that has
// not expired, or false.
func (g *Gateway) openPreview(tok string, now time.Time) (previewClaims, bool) {
	var c previewClaims
	b64, sum64, ok := strings.Cut(tok, ".")
	if !ok {
		return c, false
	}
	body, err1 := base64.RawURLEncoding.DecodeString(b64)
	sum, err2 := base64.RawURLEncoding.DecodeString(sum64)
	if err1 != nil || err2 != nil {
		return c, false
	}
	m := hmac.New(sha256.New, g.previewKey)
	m.Write([]byte("sandfleet preview\n"))
	m.Write(body)
	if !hmac.Equal(sum, m.Sum(nil)) || json.Unmarshal(body, &c) != nil || now.Unix() >= c.Expires {
		return c, false
	}
	return c, true
}

// portURL is where port of session id is reached, on the host r came to.
func portURL(r *http.Request, id string, port int) string {
	return baseURL(r) + portPrefix(id, port)
}

// baseURL is the scheme and host r came to.
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// portPrefix is the path of port of session id.
func portPrefix(id string, port int) string {
	return "/v1/sessions/" + id + "/ports/" + strconv.Itoa(port) + "/"
}

func (g *Gateway) listPorts(w http.ResponseWriter, r *http.Request, tok *Token) error {
	c, err := g.sessionsOf(tok)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	ports, err := c.Ports(r.Context(), id)
	if err != nil {
		return g.sessionErr(err)
	}
	out := make([]PortInfo, 0, len(ports))
	for _, p := range ports {
		out = append(out, PortInfo{Port: p, URL: portURL(r, id, p)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"ports": out})
	return nil
}

func (g *Gateway) unexposePort(w http.ResponseWriter, r *http.Request, tok *Token) error {
	c, err := g.sessionsOf(tok)
	if err != nil {
		return err
	}
	port, err := pathPort(r)
	if err != nil {
		return err
	}
	if _, err := c.Unexpose(r.Context(), r.PathValue("id"), port); err != nil {
		return g.sessionErr(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func pathPort(r *http.Request) (int, error) {
	v := r.PathValue("port")
	port, err := strconv.Atoi(v)
	if err != nil || sessions.ValidPort(port) != nil || strconv.Itoa(port) != v {
		return 0, apiErr(http.StatusNotFound, CodeNotFound, "no port %q: %d to 65535", v, sessions.MinPort)
	}
	return port, nil
}

// portTarget is the session's port a proxied request goes to, and the
// client that may open connections to it.
type portTarget struct {
	c        *sessions.Client
	id       string
	port     int
	exposure int // a preview token's; 0 for the owner's token
}

type portTargetKey struct{}

// proxyPort serves /v1/sessions/{id}/ports/{port}/...: any method. It is
// an open route: it authenticates by itself, since a preview token is no
// API token.
func (g *Gateway) proxyPort(w http.ResponseWriter, r *http.Request, _ *Token) error {
	id := r.PathValue("id")
	if !sessions.ValidID(id) {
		return apiErr(http.StatusNotFound, CodeNotFound, "no session %q", id)
	}
	port, err := pathPort(r)
	if err != nil {
		return err
	}
	c, exposure, err := g.portCaller(r, id, port)
	if err != nil {
		return err
	}
	// The connection may be long (a download, an event stream, a
	// WebSocket): the request's deadlines are lifted; the session's
	// connections have bounds of their own.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	ctx := context.WithValue(r.Context(), portTargetKey{}, &portTarget{c: c, id: id, port: port, exposure: exposure})
	g.portProxy.ServeHTTP(w, r.WithContext(ctx))
	return nil
}

// portCaller is the sessions client r acts as on port of session id: the
// owner's token's, or the owner's a preview token names, with the
// exposure it names.
func (g *Gateway) portCaller(r *http.Request, id string, port int) (*sessions.Client, int, error) {
	if g.cfg.Sessions == nil {
		return nil, 0, apiErr(http.StatusNotImplemented, CodeNotImplemented, "this gateway serves no sessions")
	}
	notFound := apiErr(http.StatusNotFound, CodeNotFound, "no session %q, or no port %d of it for this token", id, port)
	if g.cfg.Tokens.Len() == 0 {
		c, err := g.sessionsOf(nil) // an open gateway's
		return c, 0, err
	}
	if secret := webauth.Bearer(r.Header.Get("Authorization")); secret != "" {
		tok := g.cfg.Tokens.Lookup(secret)
		if tok == nil {
			return nil, 0, notFound
		}
		c, err := g.sessionsOf(tok)
		return c, 0, err
	}
	preview := r.Header.Get(previewHeader)
	if preview == "" {
		preview = r.URL.Query().Get(previewQuery)
	}
	if preview == "" {
		return nil, 0, apiErr(http.StatusUnauthorized, CodeUnauthorized,
			"a bearer token (Authorization: Bearer <token>) or a preview token (%s) is required", previewHeader)
	}
	pc, ok := g.openPreview(preview, time.Now())
	if !ok || pc.Session != id || pc.Port != port {
		return nil, 0, notFound
	}
	return g.cfg.Sessions.For(pc.Tenant, pc.Owner), pc.Exposure, nil
}

// newPortProxy is the reverse proxy of every session's ports: its
// transport dials the session's port of the request's portTarget, and
// keeps connections alive per session and port.
func (g *Gateway) newPortProxy() *httputil.ReverseProxy {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			t, _ := ctx.Value(portTargetKey{}).(*portTarget)
			if t == nil {
				return nil, errors.New("no session's port to dial")
			}
			return t.c.OpenExposureConn(ctx, t.id, t.port, t.exposure)
		},
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        30 * time.Second,
		ResponseHeaderTimeout:  0, // a server may think as long as it likes; the client's leaving ends it
		MaxResponseHeaderBytes: 64 << 10,
		DisableCompression:     true,
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(portTargetKey{}).(*portTarget)
			prefix := "/v1/sessions/" + t.id + "/ports/" + strconv.Itoa(t.port)
			hostport := "localhost:" + strconv.Itoa(t.port)
			// The pool's key: one per session, port and exposure, so that
			// a connection opened for a preview token of one exposure
			// (or for the owner) never carries a request of another's.
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "p"+strconv.Itoa(t.port)+"x"+strconv.Itoa(t.exposure)+"."+t.id+".session.invalid"
			pr.Out.URL.Path = "/" + pr.In.PathValue("rest")
			pr.Out.URL.RawPath = ""
			if esc := pr.In.URL.EscapedPath(); strings.HasPrefix(esc, prefix+"/") {
				pr.Out.URL.RawPath = strings.TrimPrefix(esc, prefix)
			}
			q := pr.Out.URL.Query()
			if q.Has(previewQuery) {
				q.Del(previewQuery)
				pr.Out.URL.RawQuery = q.Encode()
			}
			pr.Out.Host = hostport
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("Cookie")
			pr.Out.Header.Del(previewHeader)
			pr.SetXForwarded()
			pr.Out.Header.Set("X-Forwarded-Prefix", prefix)
		},
		Transport:     tr,
		FlushInterval: -1, // chunks and events go out as they are written
		ModifyResponse: func(res *http.Response) error {
			for _, h := range originHeaders {
				res.Header.Del(h)
			}
			res.Header.Set("Content-Security-Policy", portCSP)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			g.writeError(w, r, g.portErr(r, err))
		},
		ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
}

// portErr is the answer to a proxied request whose connection failed.
func (g *Gateway) portErr(r *http.Request, err error) error {
	t, _ := r.Context().Value(portTargetKey{}).(*portTarget)
	e := sessionapi.AsError(err)
	if e == nil || errors.Is(e, sessionapi.ErrFailed) {
		msg := "the session's server did not answer"
		if e != nil {
			msg = e.Message
		}
		if t != nil {
			msg = "port " + strconv.Itoa(t.port) + " of session " + t.id + ": " + msg
		}
		return apiErr(http.StatusBadGateway, CodeBadGateway, "%s", msg)
	}
	if errors.Is(e, sessionapi.ErrGone) {
		// An ended session's ports are no more than a missing one's.
		return apiErr(http.StatusNotFound, CodeNotFound, "%s", e.Message)
	}
	if errors.Is(e, sessionapi.ErrLimit) {
		return apiErr(http.StatusServiceUnavailable, CodeUnavailable, "%s", e.Message)
	}
	return g.sessionErr(err)
}
