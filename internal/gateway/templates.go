package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/pkg/templates"
)

// templateRegistry is the fleet's TEMPLATES bucket, opened on the
// operator's connection at its first use.
type templateRegistry struct {
	nc  *nats.Conn
	mu  sync.Mutex
	reg *templates.Registry
}

func (t *templateRegistry) get(r *http.Request) (*templates.Registry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reg != nil {
		return t.reg, nil
	}
	if t.nc == nil {
		return nil, apiErr(http.StatusNotImplemented, CodeNotImplemented, "this gateway has no operator's connection, on which the template registry is reached")
	}
	js, err := jetstream.New(t.nc)
	if err != nil {
		return nil, err
	}
	reg, err := templates.Open(r.Context(), js, 0)
	if err != nil {
		return nil, err
	}
	t.reg = reg
	return reg, nil
}

// registry is the template registry and the tenant whose templates the
// view reaches ("" for the operator's): a tenant's token reads and writes
// its tenant's own templates alone (templates.Registry keys them by
// tenant), never the operator's or another tenant's. The registry is
// reached on the operator's connection, as tenants' credentials do not
// reach the bucket; the tenant is the view's, decided in New.
func (v *view) registry(r *http.Request) (*templates.Registry, string, error) {
	reg, err := v.templates.get(r)
	if err != nil {
		return nil, "", err
	}
	return reg, v.Tenant(), nil
}

func templateErr(err error) error {
	switch {
	case errors.Is(err, templates.ErrNotFound):
		return apiErr(http.StatusNotFound, CodeNotFound, "%s", err)
	case errors.Is(err, templates.ErrInvalid):
		return apiErr(http.StatusBadRequest, CodeInvalidRequest, "%s", err)
	case errors.Is(err, templates.ErrFull):
		return apiErr(http.StatusTooManyRequests, CodeTooManyRequests, "%s", err)
	}
	return err
}

// listTemplates: GET /v1/templates: those of the token's tenant, or the
// operator's for an operator's token.
func (g *Gateway) listTemplates(w http.ResponseWriter, r *http.Request, tok *Token) error {
	reg, tenant, err := g.views.of(tok).registry(r)
	if err != nil {
		return err
	}
	list, err := reg.List(r.Context(), tenant)
	if err != nil {
		return err
	}
	if list == nil {
		list = []*templates.Template{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"templates": list})
	return nil
}

// getTemplate: GET /v1/templates/{name}: the token's tenant's (or the
// operator's, for an operator's token); another's is not found.
func (g *Gateway) getTemplate(w http.ResponseWriter, r *http.Request, tok *Token) error {
	reg, tenant, err := g.views.of(tok).registry(r)
	if err != nil {
		return err
	}
	t, err := reg.Get(r.Context(), tenant, r.PathValue("name"))
	if err != nil {
		return templateErr(err)
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

// putTemplate: PUT /v1/templates/{name}: a registration, or a new version
// of one; the body is the template (its name, if given, the path's). A
// tenant's token registers its tenant's own, within the tenant policy
// (templates.TenantPolicy).
func (g *Gateway) putTemplate(w http.ResponseWriter, r *http.Request, tok *Token) error {
	reg, tenant, err := g.views.of(tok).registry(r)
	if err != nil {
		return err
	}
	var t templates.Template
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return apiErr(http.StatusBadRequest, CodeInvalidJSON, "the body must be a template's JSON: %v", err)
	}
	name := r.PathValue("name")
	if t.Name != "" && t.Name != name {
		return apiErr(http.StatusBadRequest, CodeInvalidRequest, "name %q is not the path's %q", t.Name, name)
	}
	t.Name = name
	if t.Tenant != "" && t.Tenant != tenant {
		return apiErr(http.StatusBadRequest, CodeInvalidRequest, "tenant %q: a template's tenant is its token's", t.Tenant)
	}
	var stored *templates.Template
	if tenant == "" {
		stored, err = reg.Put(r.Context(), t)
	} else {
		stored, err = reg.PutTenant(r.Context(), tenant, t, templates.TenantPolicy{MaxTemplates: g.cfg.MaxTemplatesPerTenant})
	}
	if err != nil {
		return templateErr(err)
	}
	writeJSON(w, http.StatusOK, stored)
	return nil
}

// deleteTemplate: DELETE /v1/templates/{name}.
func (g *Gateway) deleteTemplate(w http.ResponseWriter, r *http.Request, tok *Token) error {
	reg, tenant, err := g.views.of(tok).registry(r)
	if err != nil {
		return err
	}
	if err := reg.Delete(r.Context(), tenant, r.PathValue("name")); err != nil {
		return templateErr(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
