package sessions

import (
	"context"

	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// Contexts lists the session's code contexts, by name.
func (c *Client) Contexts(ctx context.Context, id string) ([]sessionapi.Context, error) {
	var cs []sessionapi.Context
	return cs, c.Do(ctx, id, sessionapi.OpContexts, "", nil, &cs, 0)
}

// NewContext starts a code context: a name taken already is
// sessionapi.ErrExists, one over sessionapi.MaxContexts
// sessionapi.ErrLimit.
func (c *Client) NewContext(ctx context.Context, id string, req sessionapi.ContextRequest) (*sessionapi.Context, error) {
	var cx sessionapi.Context
	return &cx, c.Do(ctx, id, sessionapi.OpContext, "", req, &cx, 0)
}

// EndContext ends the named code context (sessionapi.ErrNotFound when
// the session has none of that name).
func (c *Client) EndContext(ctx context.Context, id, name string) error {
	return c.Do(ctx, id, sessionapi.OpEndContext, "", sessionapi.ContextRequest{Name: name}, nil, 0)
}
