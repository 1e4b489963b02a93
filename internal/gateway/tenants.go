package gateway

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/natsconn"
	"github.com/sandfleet/sandfleet/internal/natscreds"
	"github.com/sandfleet/sandfleet/internal/natsurl"
	"github.com/sandfleet/sandfleet/internal/scope"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// Conn is a connection a gateway serves through: a client of the fleet,
// and the NATS connection it is made on, where the gateway takes the
// replies of the jobs it waits for.
type Conn struct {
	Client *jobs.Client
	NC     *nats.Conn
}

// view is what one caller reaches, as the gateway serves it: its scope
// (its jobs client and what it may name), the replies of the jobs it
// waits for (taken on the scope's own connection, shared by the scope's
// callers), its sessions client (as its token's owner; nil where the
// gateway serves no sessions) and the template registry, in which it
// reaches its scope's tenant's templates.
type view struct {
	scope.Scope
	replies   *replies
	sessions  *sessions.Client
	templates *templateRegistry
}

// views is what every caller reaches, decided once, in New: a token of
// tenant T is served over T's connection alone; any other token (and an
// open gateway's caller) over the operator's. A handler asks it for the
// view of its token and never checks a tenant itself.
type views struct {
	operator *view            // an open gateway's caller's; nil when the gateway holds no operator connection
	tenants  map[string]*view // each tenant's scope, before a token's owner is set
	tokens   map[string]*view // by token name (names are unique in a token file)
}

// of returns tok's view (nil: an open gateway's caller). New has made one
// for every token.
func (vs *views) of(tok *Token) *view { return vs.named(tokenName(tok)) }

// named returns the view of the token of this name, "" for an open
// gateway's caller.
func (vs *views) named(name string) *view {
	if name == "" {
		return vs.operator
	}
	return vs.tokens[name]
}

// newViews builds the views of the operator's connection (nil client: none)
// and of the tenants', checks that every token has one, and gives each
// token its own, with its sessions client (from sess; nil: none).
func newViews(operator Conn, tenants map[string]Conn, tokens *Tokens, sess *sessions.Client) (*views, error) {
	vs := &views{tenants: map[string]*view{}, tokens: map[string]*view{}}
	reg := &templateRegistry{nc: operator.NC}
	fail := func(err error) (*views, error) {
		vs.close()
		return nil, err
	}
	if operator.Client != nil {
		if t := operator.Client.Tenant(); t != "" {
			return fail(fmt.Errorf("gateway: the operator's client is tenant %s's", t))
		}
		rep, err := newReplies(operator.NC)
		if err != nil {
			return fail(err)
		}
		vs.operator = &view{Scope: scope.Of(operator.Client), replies: rep, templates: reg}
	}
	for t, c := range tenants {
		// A client of another tenant here would serve T's tokens with
		// that tenant's credentials.
		if c.Client == nil || c.Client.Tenant() != t {
			return fail(fmt.Errorf("gateway: the client of tenant %s is not a client of that tenant (jobs.NewTenantClient)", t))
		}
		rep, err := newReplies(c.NC)
		if err != nil {
			return fail(fmt.Errorf("gateway: tenant %s: %w", t, err))
		}
		vs.tenants[t] = &view{Scope: scope.Of(c.Client), replies: rep, templates: reg}
	}
	if vs.operator == nil && (tokens.Len() == 0 || tokens.Operators()) {
		return fail(errors.New("gateway: a token of no tenant (or an open gateway) needs the operator's client"))
	}
	for _, t := range tokens.Tenants() {
		if vs.tenants[t] == nil {
			return fail(fmt.Errorf("gateway: a token is tenant %s's, but the gateway has no connection of that tenant (--tenant-creds %s=FILE)", t, t))
		}
	}
	if vs.operator != nil {
		vs.operator.sessions = sessionsFor(sess, "", "")
	}
	for _, tok := range tokens.list() {
		base := vs.operator
		if tok.Tenant != "" {
			base = vs.tenants[tok.Tenant]
		}
		v := *base
		v.sessions = sessionsFor(sess, tok.Tenant, tok.Name)
		vs.tokens[tok.Name] = &v
	}
	return vs, nil
}

// sessionsFor is sess as tenant t's owner (nil: no sessions served).
func sessionsFor(sess *sessions.Client, t, owner string) *sessions.Client {
	if sess == nil {
		return nil
	}
	return sess.For(t, owner)
}

func (vs *views) close() {
	if vs.operator != nil {
		vs.operator.replies.close()
	}
	for _, v := range vs.tenants {
		v.replies.close()
	}
}

// DialTenant connects to NATS as tenant t, as a gateway serving t's
// tokens must: with t's own credentials, read from credsFile, and t's
// inbox prefix (jobs.TenantOptions), to the servers of cfg.URL without
// whatever user and password they carry (the operator's, if any: never
// for t's requests). credsFile is a NATS credentials file (a user JWT and
// its seed, as nsc writes) or holds one line USER:PASSWORD (the user
// tenant-t of deploy/compose/tenants.sh and its password). The
// connection's client is jobs.NewTenantClient(js, t, ccfg).
func DialTenant(cfg natsconn.Config, t, credsFile string, ccfg jobs.Config) (Conn, error) {
	if !jobs.ValidTenant(t) {
		return Conn{}, fmt.Errorf("tenant %q must match [a-z0-9][a-z0-9-]{0,31}", t)
	}
	auth, err := natscreds.Option(credsFile)
	if err != nil {
		return Conn{}, fmt.Errorf("tenant %s: %w", t, err)
	}
	cfg.URL = natsurl.WithoutUser(natsconn.ServerURL(cfg.URL))
	cfg.Extra = append(append(append([]nats.Option(nil), cfg.Extra...), auth), jobs.TenantOptions(t)...)
	nc, js, err := natsconn.JetStream(cfg)
	if err != nil {
		return Conn{}, fmt.Errorf("tenant %s: %w", t, err)
	}
	client, err := jobs.NewTenantClient(js, t, ccfg)
	if err != nil {
		nc.Close()
		return Conn{}, err
	}
	return Conn{Client: client, NC: nc}, nil
}
