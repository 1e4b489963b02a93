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
		return nil, apiErr(http.StatusNotImplemented, CodeNotImplemented, "this gateway has no operator's connection: templates are the operator's")
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

// registryOf is the registry for tok: templates are the operator's, so a
// tenant's token is refused (its jobs may still name a template).
func (g *Gateway) registryOf(r *http.Request, tok *Token) (*templates.Registry, error) {
	if tok != nil && tok.Tenant != "" {
		return nil, apiErr(http.StatusForbidden, CodeForbidden, "templates are the operator's: a tenant's jobs may name one, not register one")
	}
	return g.templates.get(r)
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

// listTemplates: GET /v1/templates.
func (g *Gateway) listTemplates(w http.ResponseWriter, r *http.Request, tok *Token) error {
	reg, err := g.registryOf(r, tok)
	if err != nil {
		return err
	}
	list, err := reg.List(r.Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []*templates.Template{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"templates": list})
	return nil
}

// getTemplate: GET /v1/templates/{name}.
func (g *Gateway) getTemplate(w http.ResponseWriter, r *http.Request, tok *Token) error {
	reg, err := g.registryOf(r, tok)
	if err != nil {
		return err
	}
	t, err := reg.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		return templateErr(err)
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

// putTemplate: PUT /v1/templates/{name}: a registration, or a new version
// of one; the body is the template (its name, if given, the path's).
func (g *Gateway) putTemplate(w http.ResponseWriter, r *http.Request, tok *Token) error {
	reg, err := g.registryOf(r, tok)
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
	stored, err := reg.Put(r.Context(), t)
	if err != nil {
		return templateErr(err)
	}
	writeJSON(w, http.StatusOK, stored)
	return nil
}

// deleteTemplate: DELETE /v1/templates/{name}.
func (g *Gateway) deleteTemplate(w http.ResponseWriter, r *http.Request, tok *Token) error {
	reg, err := g.registryOf(r, tok)
	if err != nil {
		return err
	}
	if err := reg.Delete(r.Context(), r.PathValue("name")); err != nil {
		return templateErr(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
