package mcp

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// ToolExposePort lets a server a session runs be reached from outside it.
const ToolExposePort = "expose_port"

// ExposePortArgs are expose_port's.
type ExposePortArgs struct {
	Session string  `json:"session"`
	Port    int     `json:"port"`
	Wait    float64 `json:"wait,omitempty"` // seconds
}

// PortLink is an exposed port: its URL, and a preview token that lets a
// request without the caller's token in.
type PortLink struct {
	URL       string
	Token     string
	ExpiresAt time.Time
}

// PortExposer is a SessionRunner that exposes a session's port and says
// where it is reached: the gateway's, whose address the URL is and whose
// key signs the preview token. Without one, expose_port exposes the port
// and names its path on the gateway.
type PortExposer interface {
	// ExposePort exposes port of session, waits up to wait for it to
	// accept, and gives its URL on base (the scheme and host the call
	// came to; "": a URL of the path alone).
	ExposePort(ctx context.Context, base, session string, port int, wait time.Duration) (*PortLink, error)
}

// HeaderBaseURL is set by the server in front of the HTTP transport (the
// gateway) to the scheme and host a call came to: the URL expose_port
// gives is there when the caller carries no BaseURL.
const HeaderBaseURL = "X-Sandfleet-Base-Url"

// maxExposeWait bounds expose_port's wait (the gateway's own bound).
const maxExposeWait = 120.0

func exposePortDef() Def {
	minP, maxP, zero, maxW := float64(sessions.MinPort), 65535.0, 0.0, maxExposeWait
	return Def{Name: ToolExposePort, Description: "Let a server a session runs on 127.0.0.1:PORT (a web app, a notebook, an API started in the background with exec) be reached from outside the session, " +
		"by a person's browser or another program, through the fleet's gateway; the sandbox's network stays closed. " +
		"Returns the URL, and a preview URL that carries a token good for this port alone until it expires (an hour), for someone without the caller's credentials.",
		InputSchema: strict(map[string]*jsonschema.Schema{"session": sessionProp,
			"port": {Type: "integer", Minimum: &minP, Maximum: &maxP, Description: "The port the server listens on in the session."},
			"wait": {Type: "number", ExclusiveMinimum: &zero, Maximum: &maxW, Description: "Seconds to wait for the server to accept a connection before answering (it fails if it does not)."},
		}, "session", "port")}
}

func (s *Server) exposePort(ctx context.Context, req *sdk.CallToolRequest, in ExposePortArgs) (*sdk.CallToolResult, error) {
	c, fail, err := s.sessionsOf(req)
	if c == nil {
		return fail, err
	}
	r, err := s.runner(callerOf(req.Extra))
	if err != nil {
		return nil, err
	}
	pe, ok := r.(PortExposer)
	if !ok {
		if _, err := c.Expose(ctx, in.Session, in.Port); err != nil {
			return s.sessionFailure(err), nil
		}
		return s.textResult(false, fmt.Sprintf("port %d exposed; the fleet's gateway serves it at /v1/sessions/%s/ports/%d/ to the session's owner", in.Port, in.Session, in.Port)), nil
	}
	base := ""
	if c := callerOf(req.Extra); c != nil {
		base = c.BaseURL
	}
	if base == "" && req.Extra != nil {
		base = req.Extra.Header.Get(HeaderBaseURL)
	}
	link, err := pe.ExposePort(ctx, base, in.Session, in.Port, seconds(in.Wait).D())
	if err != nil {
		return s.sessionFailure(err), nil
	}
	sep := "?"
	if strings.Contains(link.URL, "?") {
		sep = "&"
	}
	return s.textResult(false, fmt.Sprintf("url: %s\npreview url: %s%ssandfleet_preview=%s\npreview token: %s\nexpires at: %s",
		link.URL, link.URL, sep, link.Token, link.Token, link.ExpiresAt.UTC().Format(time.RFC3339))), nil
}
