package gateway

import (
	"net/http"

	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// ContextList is the answer of GET /v1/sessions/{id}/contexts.
type ContextList struct {
	Contexts []sessionapi.Context `json:"contexts"`
}

func (g *Gateway) listContexts(w http.ResponseWriter, r *http.Request, tok *Token) error {
	var cs []sessionapi.Context
	if err := g.sessionCall(w, r, tok, sessionapi.OpContexts, nil, &cs, 0); err != nil {
		return err
	}
	if cs == nil {
		cs = []sessionapi.Context{}
	}
	writeJSON(w, http.StatusOK, ContextList{Contexts: cs})
	return nil
}

// newContext starts a code context: 201 with it; a name taken is 409
// (exists), one over the session's contexts 429.
func (g *Gateway) newContext(w http.ResponseWriter, r *http.Request, tok *Token) error {
	var req sessionapi.ContextRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	var cx sessionapi.Context
	if err := g.sessionCall(w, r, tok, sessionapi.OpContext, req, &cx, 0); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, &cx)
	return nil
}

func (g *Gateway) endContext(w http.ResponseWriter, r *http.Request, tok *Token) error {
	req := sessionapi.ContextRequest{Name: r.PathValue("name")}
	if err := g.sessionCall(w, r, tok, sessionapi.OpEndContext, req, nil, 0); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
