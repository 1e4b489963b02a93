package mcp

import (
	"context"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// inflight are the tool calls running over HTTP, by the POST that carries
// each and by its MCP session, so that the transport can end a call whose
// client left (its POST dropped) or whose session was deleted. Ending one
// cancels its context, as the client's notifications/cancelled does: the
// job is canceled, the session's command interrupted.
type inflight struct {
	mu    sync.Mutex
	calls map[*running]struct{}
}

type running struct {
	post    string // the POST's headerPost
	session string // the MCP session's ID
	caller  string // Caller.Name: only its own caller may delete a session
	cancel  context.CancelCauseFunc
}

// start registers a call and returns its context and the func that ends
// its registration. A call outside HTTP (stdio, POST /v1/tools) is not
// registered: its own context ends it.
func (f *inflight) start(ctx context.Context, req *sdk.CallToolRequest) (context.Context, func()) {
	if req == nil || req.Extra == nil || req.Extra.Header == nil || req.Extra.Header.Get(headerPost) == "" {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	r := &running{post: req.Extra.Header.Get(headerPost), caller: callerName(callerOf(req.Extra)), cancel: cancel}
	if req.Session != nil {
		r.session = req.Session.ID()
	}
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[*running]struct{}{}
	}
	f.calls[r] = struct{}{}
	f.mu.Unlock()
	return ctx, func() {
		f.mu.Lock()
		delete(f.calls, r)
		f.mu.Unlock()
		cancel(context.Canceled)
	}
}

// cancelPost cancels the calls a POST carries.
func (f *inflight) cancelPost(post string, why error) {
	f.cancel(func(r *running) bool { return r.post == post }, why)
}

// cancelSession cancels the calls of a session that caller opened.
func (f *inflight) cancelSession(session, caller string, why error) {
	f.cancel(func(r *running) bool { return r.session == session && r.caller == caller }, why)
}

func (f *inflight) cancel(match func(*running) bool, why error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for r := range f.calls {
		if match(r) {
			r.cancel(why)
		}
	}
}
