package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/jobindex"
	"github.com/sandfleet/sandfleet/internal/scope"
	"github.com/sandfleet/sandfleet/internal/webauth"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	fleetsessions "github.com/sandfleet/sandfleet/pkg/sessions"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Viewer is who looks at the console: a token's name, whether it may
// cancel jobs (a read-only token may not), and its scope: the client its
// pages read through and what they may show (a tenant's token sees its
// tenant alone).
type Viewer struct {
	Name      string
	CanCancel bool
	Scope     scope.Scope
}

// Config of a Console. The zero value of each field is its documented
// default.
type Config struct {
	// Auth returns the viewer a bearer secret admits, with its Scope, or
	// nil. Nil Auth is an open console (a gateway without tokens, on
	// loopback): everyone is an operator, with New's client, and requests
	// must name a loopback host, so that a web page elsewhere cannot
	// reach it through DNS rebinding.
	Auth func(secret string) *Viewer
	// PageSize is the number of jobs a list shows. Default 50.
	PageSize int
	// MaxScan bounds the index records one list reads through (status,
	// label and ID filters), as jobindex.Query.MaxScan. Default 20,000.
	MaxScan uint64
	// MaxBatchJobs bounds the records a batch's report reads. Default
	// 100,000.
	MaxBatchJobs int
	// MaxOutput is the most of each output stream a finished job's page
	// shows. Default 256 KiB.
	MaxOutput int
	// SessionTTL is how long a login lasts: its session then ends, and
	// its cookie with it. Default 12h.
	SessionTTL time.Duration
	// MaxSessions bounds the logins held at once; past it, a login ends
	// the session nearest its end. Default 10,000.
	MaxSessions int
	// Index is the operator's connection, on which operators' pages read
	// the job index (internal/jobindex); nil shows no index.
	Index jetstream.JetStream
	// Sessions returns the sessions client of a viewer (as its token's
	// owner); nil serves no sessions pages.
	Sessions func(*Viewer) *fleetsessions.Client
	// Logger default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.PageSize <= 0 {
		c.PageSize = 50
	}
	if c.MaxScan == 0 {
		c.MaxScan = 20_000
	}
	if c.MaxBatchJobs <= 0 {
		c.MaxBatchJobs = 100_000
	}
	if c.MaxOutput <= 0 {
		c.MaxOutput = 256 << 10
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = 12 * time.Hour
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = 10_000
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// CookieName is the cookie that holds a logged-in viewer's session ID
// (HttpOnly, SameSite=Strict), never the bearer token. The gateway takes
// it (LoginSecret), like the Authorization header, on its GET routes, so
// that the console's pages can follow a job's events (EventSource sends
// no header) and download its artifacts.
const CookieName = "sandfleet_login"

// sessionCookie holds an open console's random session, which its CSRF
// tokens are derived from.
const sessionCookie = "sandfleet_session"

// Console serves the web pages.
type Console struct {
	client *jobs.Client
	cfg    Config
	log    *slog.Logger
	pages  map[string]*template.Template
	static http.Handler
	logins *sessions
}

// New returns the console of client's fleet: the client of an open
// console (nil when Auth is set: each viewer brings its own).
func New(client *jobs.Client, cfg Config) (*Console, error) {
	cfg.setDefaults()
	if cfg.Auth == nil && client == nil {
		return nil, errors.New("console: an open console (no Auth) needs a client")
	}
	c := &Console{client: client, cfg: cfg, log: cfg.Logger, pages: map[string]*template.Template{},
		logins: newSessions(cfg.SessionTTL, cfg.MaxSessions)}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if n == "templates/layout.html" {
			continue
		}
		t, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", n, err)
		}
		c.pages[strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")] = t
	}
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	files := http.FileServerFS(sub)
	c.static = http.StripPrefix("/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "public, max-age=300")
		files.ServeHTTP(w, r)
	}))
	return c, nil
}

// Route is one of the console's endpoints, for the gateway to mount.
type Route struct {
	Pattern string
	Handler http.Handler
}

// Routes returns the console's endpoints: HTML pages, the forms they
// post, and the static files.
func (c *Console) Routes() []Route {
	return []Route{
		{"GET /{$}", c.page(c.fleet)},
		{"GET /jobs", c.page(c.jobList)},
		{"GET /jobs/{id}", c.page(c.job)},
		{"POST /jobs/{id}/cancel", c.form(c.cancel)},
		{"GET /batches", c.page(c.batchList)},
		{"GET /batches/{name}", c.page(c.batch)},
		{"GET /workspaces", c.page(c.workspaceList)},
		{"GET /workspaces/{name}", c.page(c.workspace)},
		{"GET /sessions", c.page(c.sessionList)},
		{"GET /sessions/{id}", c.page(c.sessionDetail)},
		{"GET /login", http.HandlerFunc(c.loginPage)},
		{"POST /login", http.HandlerFunc(c.login)},
		{"POST /logout", c.form(c.logout)},
		{"GET /static/", c.static},
	}
}

// session is one request's viewer and the secret its CSRF token comes
// from: the login's ID for a viewer logged in through the form (so its
// forms die with it), else the bearer secret or an open console's random.
type session struct {
	viewer  *Viewer
	secret  string
	csrf    string
	loginID string // the login cookie's session, "" for none
}

// client is what every read and cancel of the session's pages goes
// through: its viewer's scope's.
func (s *session) client() *jobs.Client { return s.viewer.Scope.Client() }

// index opens the job index for s's viewer: jobs.ErrNotTenants for a
// tenant's (the index lists every tenant's jobs), jobindex.ErrNoIndex
// when the console has none.
func (c *Console) index(ctx context.Context, s *session) (*jobindex.Index, error) {
	switch {
	case s.viewer.Scope.Tenant() != "":
		return nil, fmt.Errorf("index: %w", jobs.ErrNotTenants)
	case c.cfg.Index == nil:
		return nil, jobindex.ErrNoIndex
	}
	return jobindex.Open(ctx, c.cfg.Index)
}

// errLogin: no viewer; the page sends the browser to the login form.
var errLogin = errors.New("login required")

// errHost: an open console asked under a name that is not loopback.
var errHost = errors.New("an open console answers on loopback names only")

// authenticate finds the request's viewer: the bearer token of the
// Authorization header or of the cookie; anyone on an open console.
func (c *Console) authenticate(w http.ResponseWriter, r *http.Request) (*session, error) {
	if c.cfg.Auth == nil {
		if !webauth.LoopbackHost(r.Host) {
			return nil, errHost
		}
		s := &session{viewer: &Viewer{CanCancel: true, Scope: scope.Of(c.client)}}
		if ck, err := r.Cookie(sessionCookie); err == nil && len(ck.Value) == 32 {
			s.secret = ck.Value
		} else {
			var b [16]byte
			_, _ = rand.Read(b[:])
			s.secret = hex.EncodeToString(b[:])
			http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.secret, Path: "/", HttpOnly: true,
				SameSite: http.SameSiteStrictMode, Secure: webauth.Secure(r)})
		}
		s.csrf = csrfToken(s.secret)
		return s, nil
	}
	if secret := webauth.Bearer(r.Header.Get("Authorization")); secret != "" {
		v := c.cfg.Auth(secret)
		if v == nil || v.Scope.Client() == nil {
			return nil, errLogin
		}
		return &session{viewer: v, secret: secret, csrf: csrfToken(secret)}, nil
	}
	ck, err := r.Cookie(CookieName)
	if err != nil {
		return nil, errLogin
	}
	// The token is asked again on every page: one taken out of the
	// gateway's tokens ends its sessions with it.
	secret := c.logins.secret(ck.Value)
	if secret == "" {
		return nil, errLogin
	}
	v := c.cfg.Auth(secret)
	if v == nil || v.Scope.Client() == nil {
		return nil, errLogin
	}
	return &session{viewer: v, secret: ck.Value, csrf: csrfToken(ck.Value), loginID: ck.Value}, nil
}

// LoginSecret returns the bearer secret that the request's login cookie
// stands for while its session lasts, else "". The gateway asks it on its
// GET routes, for what the console's pages read without a header of their
// own (EventSource, downloads).
func (c *Console) LoginSecret(r *http.Request) string {
	ck, err := r.Cookie(CookieName)
	if err != nil {
		return ""
	}
	return c.logins.secret(ck.Value)
}

// csrfToken is what the console's forms carry: an HMAC of the session's
// secret, so that a page elsewhere (which cannot read the console's
// pages) cannot make it.
func csrfToken(secret string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("sandfleet console csrf v1"))
	return hex.EncodeToString(m.Sum(nil))[:40]
}

// handler is a page's function: it renders, or returns an error that
// page turns into an error page.
type handler func(w http.ResponseWriter, r *http.Request, s *session) error

// pageError is an error with the status its page answers.
type pageError struct {
	status int
	msg    string
}

func (e *pageError) Error() string { return e.msg }

func notFound(format string, args ...any) error {
	return &pageError{status: http.StatusNotFound, msg: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) error {
	return &pageError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// page serves a GET page: authentication, then h.
func (c *Console) page(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		headers(w)
		s, err := c.authenticate(w, r)
		if err != nil {
			c.denied(w, r, err)
			return
		}
		if err := h(w, r, s); err != nil {
			c.fail(w, r, s, err)
		}
	})
}

// form serves a form's POST: authentication, the same origin and the
// CSRF token, then h.
func (c *Console) form(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		headers(w)
		r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
		s, err := c.authenticate(w, r)
		if err != nil {
			c.denied(w, r, err)
			return
		}
		if !webauth.SameOrigin(r) || !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) {
			c.fail(w, r, s, &pageError{status: http.StatusForbidden, msg: "the form's CSRF token does not match: reload the page and try again"})
			return
		}
		if err := h(w, r, s); err != nil {
			c.fail(w, r, s, err)
		}
	})
}

// headers are those of every page: nothing from elsewhere, no inline
// script, no framing, nothing cached.
func headers(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

func (c *Console) denied(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errHost) {
		c.render(w, http.StatusForbidden, "error", nil, errorPage{Title: "Forbidden", Message: err.Error()})
		return
	}
	next := r.URL.RequestURI()
	if r.Method != http.MethodGet {
		next = "/"
	}
	http.Redirect(w, r, "/login?next="+url.QueryEscape(next), http.StatusSeeOther)
}

type errorPage struct {
	Title, Message string
}

// fail answers an error page; what is not a pageError is logged, never
// shown.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	var pe *pageError
	switch {
	case errors.As(err, &pe):
	case errors.Is(err, jobs.ErrNotFound):
		pe = &pageError{status: http.StatusNotFound, msg: "no such job (never submitted, or its result expired)"}
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		return
	case errors.Is(err, context.DeadlineExceeded):
		pe = &pageError{status: http.StatusServiceUnavailable, msg: "the fleet's JetStream did not answer in time; retry"}
	default:
		c.log.Error("console page failed", "path", r.URL.Path, "err", err)
		pe = &pageError{status: http.StatusInternalServerError, msg: "internal error (the gateway's log has it)"}
	}
	c.render(w, pe.status, "error", s, errorPage{Title: http.StatusText(pe.status), Message: pe.msg})
}

// frame is what a page tells the layout around it: its title, the
// navigation entry it belongs to, and how often <main> refreshes itself.
type frame struct {
	Title   string
	Nav     string // the navigation entry shown as current; "": none
	Refresh int    // seconds between live refreshes of <main>; 0: none
}

// layout is what every page's frame needs.
type layout struct {
	frame
	Viewer *Viewer
	CSRF   string
	Page   any
}

func (c *Console) render(w http.ResponseWriter, status int, name string, s *session, page any) {
	t := c.pages[name]
	l := layout{Page: page}
	if s != nil {
		l.Viewer, l.CSRF = s.viewer, s.csrf
	}
	if p, ok := page.(interface{ frame() frame }); ok {
		l.frame = p.frame()
	} else if e, ok := page.(errorPage); ok {
		l.Title = e.Title
	}
	var buf strings.Builder
	if err := t.ExecuteTemplate(&buf, "layout", l); err != nil {
		c.log.Error("render console page", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(buf.String()))
}

// ctx bounds what one page asks of JetStream.
func pageCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 10*time.Second)
}
