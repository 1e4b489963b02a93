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
)

// Conn is a connection a gateway serves through: a client of the fleet,
// and the NATS connection it is made on, where the gateway takes the
// replies of the jobs it waits for.
type Conn struct {
	Client *jobs.Client
	NC     *nats.Conn
}

// view is one scope as the gateway serves it: the scope (its client and
// what it may name) and the replies of the jobs its callers wait for,
// taken on the scope's own connection.
type view struct {
	scope.Scope
	replies *replies
}

// views is the client of every token, decided once, in New: a token of
// tenant T is served by T's view, over T's connection alone; any other
// token (and an open gateway's caller) by the operator's. A handler asks
// it for the view of its token and never checks a tenant itself.
type views struct {
	operator *view // nil when the gateway holds no operator connection
	tenants  map[string]*view
}

// of returns tok's view. New has checked that every admitted token has one.
func (vs *views) of(tok *Token) *view {
	if tok != nil && tok.Tenant != "" {
		return vs.tenants[tok.Tenant]
	}
	return vs.operator
}

// newViews builds the views of the operator's connection (nil client: none)
// and of the tenants', and checks that every token has its view.
func newViews(operator Conn, tenants map[string]Conn, tokens *Tokens) (*views, error) {
	vs := &views{tenants: map[string]*view{}}
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
		vs.operator = &view{Scope: scope.Of(operator.Client), replies: rep}
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
		vs.tenants[t] = &view{Scope: scope.Of(c.Client), replies: rep}
	}
	if vs.operator == nil && (tokens.Len() == 0 || tokens.Operators()) {
		return fail(errors.New("gateway: a token of no tenant (or an open gateway) needs the operator's client"))
	}
	for _, t := range tokens.Tenants() {
		if vs.tenants[t] == nil {
			return fail(fmt.Errorf("gateway: a token is tenant %s's, but the gateway has no connection of that tenant (--tenant-creds %s=FILE)", t, t))
		}
	}
	return vs, nil
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
