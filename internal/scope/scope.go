// Package scope is the one rule of what a caller of the HTTP gateway and
// its console may see of a fleet, decided once per caller when its client
// is chosen and asked by every route and page alike.
package scope

import (
	"errors"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// ErrHidden is the error for a name outside a scope: another tenant's job
// or workspace, or, from the operator's scope, a tenant's. Routes and pages
// answer it as "not found": whether such a job exists is not the caller's
// to learn.
var ErrHidden = errors.New("not in this caller's scope")

// Scope is the part of a fleet one caller reaches: the client its requests
// go through, and the names it may use. The operator's scope (a client of
// no tenant) reaches the jobs and workspaces of no tenant; a tenant's (a
// client of jobs.NewTenantClient, over a connection made with that
// tenant's own credentials) reaches its tenant's alone, and the server's
// permissions on that connection draw the same line again, should the
// rule here be wrong.
type Scope struct {
	client *jobs.Client
}

// Of returns the scope of client's caller: a tenant's when client is a
// tenant's (client.Tenant()), else the operator's.
func Of(client *jobs.Client) Scope { return Scope{client: client} }

// Client is the client every request of the caller goes through; nil for
// the zero Scope.
func (s Scope) Client() *jobs.Client { return s.client }

// Tenant is the scope's tenant, "" for the operator's.
func (s Scope) Tenant() string {
	if s.client == nil {
		return ""
	}
	return s.client.Tenant()
}

// Job returns a job ID as the scope's client names it: for a tenant's,
// qualified (id → <tenant>.id; "" → a new <tenant>.<UUIDv7>); for the
// operator's, unchanged. A name outside the scope is ErrHidden.
func (s Scope) Job(id string) (string, error) {
	if s.Tenant() == "" {
		if jobs.TenantOf(id) != "" {
			return "", ErrHidden
		}
		return id, nil
	}
	q, err := s.client.QualifyID(id)
	if err != nil {
		return "", ErrHidden
	}
	return q, nil
}

// Workspace is Job for a workspace's name.
func (s Scope) Workspace(name string) (string, error) {
	if s.Tenant() == "" {
		if jobs.TenantOf(name) != "" {
			return "", ErrHidden
		}
		return name, nil
	}
	q, err := s.client.QualifyWorkspace(name)
	if err != nil {
		return "", ErrHidden
	}
	return q, nil
}

// Shows reports whether a list may show a job or workspace of this name:
// whether it is the scope's, as it is named (qualified, for a tenant's).
func (s Scope) Shows(name string) bool { return jobs.TenantOf(name) == s.Tenant() }
