package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPOptions configure HTTPHandler.
type HTTPOptions struct {
	// MaxBodyBytes caps a request's body. Default 4 MiB.
	MaxBodyBytes int64
	// SessionTimeout closes a session idle that long. Default 30m.
	SessionTimeout time.Duration
}

type callerCtxKey struct{}

// WithCaller returns r as asked by c. The gateway authenticates a request
// before HTTPHandler serves it, and says so with WithCaller.
func WithCaller(r *http.Request, c *Caller) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), callerCtxKey{}, c))
}

func caller(r *http.Request) *Caller {
	c, _ := r.Context().Value(callerCtxKey{}).(*Caller)
	return c
}

// HTTPVersions are the protocol revisions the Streamable HTTP transport
// serves, newest first: those of the SDK's that its stateful transport
// (sessions in Mcp-Session-Id) serves. 2026-07-28 and later are served by
// the SDK's stateless transport only, which keeps no session for the
// tools of sessions, the artifacts' links or cancellation to rest on.
func HTTPVersions() []string {
	t := &sdk.StreamableServerTransport{}
	return slices.DeleteFunc(sdk.SupportedProtocolVersions(), func(v string) bool { return !t.SupportsProtocolVersion(v) })
}

// Headers of the Streamable HTTP transport.
const (
	headerVersion = "Mcp-Protocol-Version"
	headerSession = "Mcp-Session-Id"
	// headerPost names one POST to the tool calls it carries (inflight):
	// the SDK hands a tool its request's header, and nothing else of the
	// request. The handler sets it; a client's own is dropped.
	headerPost = "Sandfleet-Mcp-Post"
)

// HTTPHandler serves the Streamable HTTP transport. The caller is the one
// WithCaller gave (none: an open gateway's); this handler binds each
// session to the caller that opened it, so that another token cannot use
// a session ID it learned.
//
// In front of the SDK's handler it does three things the SDK does not:
//   - a request of a protocol revision the transport does not serve
//     (2026-07-28's server/discover, which starts that revision) is
//     answered with the error that revision prescribes, -32022 with the
//     revisions served, so that the client negotiates down to one of them
//     (initialize) instead of failing its later requests;
//   - a POST whose client leaves before its answer (the request or its
//     stream dropped) cancels the tool calls it carries, as
//     notifications/cancelled would: no event store keeps an answer for a
//     client that comes back, so nobody would read it;
//   - DELETE of a session cancels its calls first, so that it is answered
//     at once rather than after the calls end.
func (s *Server) HTTPHandler(o HTTPOptions) http.Handler {
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = 30 * time.Minute
	}
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv }, &sdk.StreamableHTTPOptions{
		Logger:              s.opts.Logger,
		MaxRequestBodyBytes: o.MaxBodyBytes,
		SessionTimeout:      o.SessionTimeout,
		// The gateway checks Host and Origin itself, as for the rest of its
		// API (a gateway without tokens answers loopback names only); the
		// SDK's own check would refuse a tokened gateway behind a proxy on
		// the same machine, which forwards with the public Host.
		DisableLocalhostProtection: true,
	})
	// The SDK keeps a session to the token's UserID; the only way to hand
	// it one is its bearer middleware, whose verifier here just reads what
	// the gateway already found.
	verified := auth.RequireBearerToken(func(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		c := caller(r)
		if c == nil {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: c.Name, Extra: map[string]any{callerKey: c}}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
	served := HTTPVersions()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var next http.Handler = h
		if caller(r) != nil {
			next = verified
		}
		r.Header.Del(headerPost)
		switch r.Method {
		case http.MethodPost:
			if v := r.Header.Get(headerVersion); v != "" && !slices.Contains(served, v) && v > served[0] {
				unsupportedVersion(w, r, o.MaxBodyBytes, v, served)
				return
			}
			s.servePOST(next, w, r)
		case http.MethodDelete:
			if id := r.Header.Get(headerSession); id != "" {
				s.inflight.cancelSession(id, callerName(caller(r)), errSessionDeleted)
			}
			next.ServeHTTP(w, r)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// servePOST serves a POST and, when its client leaves before the answer,
// cancels the calls it carries.
func (s *Server) servePOST(next http.Handler, w http.ResponseWriter, r *http.Request) {
	post := rand.Text()
	r.Header.Set(headerPost, post)
	stop := context.AfterFunc(r.Context(), func() { s.inflight.cancelPost(post, errClientLeft) })
	defer stop()
	next.ServeHTTP(w, r)
}

// unsupportedVersion answers a request of revision v, which this
// transport does not serve, as that revision says: HTTP 400 and JSON-RPC
// error -32022 (UnsupportedProtocolVersion) naming the revisions served.
// A client that opened with 2026-07-28's server/discover then falls back
// to initialize at the newest of them.
func unsupportedVersion(w http.ResponseWriter, r *http.Request, maxBody int64, v string, served []string) {
	if maxBody <= 0 {
		maxBody = 4 << 20
	}
	var msg struct {
		ID json.RawMessage `json:"id"`
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err == nil {
		_ = json.NewDecoder(bytes.NewReader(body)).Decode(&msg)
	}
	id := msg.ID
	if len(id) == 0 || !json.Valid(id) {
		id = json.RawMessage("null")
	}
	data, _ := json.Marshal(sdk.UnsupportedProtocolVersionData{Supported: served, Requested: v})
	out, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   jsonrpc.Error   `json:"error"`
	}{"2.0", id, jsonrpc.Error{Code: sdk.CodeUnsupportedProtocolVersion,
		Message: "protocol version " + v + " is not served here; use one of the supported versions (initialize negotiates them)", Data: data}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(out)
}

// Why a call was canceled by the transport rather than by its client.
var (
	errClientLeft     = errors.New("the client left before the answer")
	errSessionDeleted = errors.New("the MCP session was deleted")
)

func callerName(c *Caller) string {
	if c == nil {
		return ""
	}
	return c.Name
}
