package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/sessionhost"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// contextSandbox is a sandbox whose agent answers the contexts' calls as
// the launcher's does, from a table: a name taken is ErrExists, a
// seventeenth context ErrLimit, an unknown name's end ErrNotFound. The
// launcher's own answers are tested in Docker (executor's tests).
type contextSandbox struct {
	idleSandbox
	ctxs map[string]sessionapi.Context
}

func (s *contextSandbox) Do(_ context.Context, req *envelope.Request) (*envelope.Reply, error) {
	r := &envelope.Reply{ID: req.ID}
	var body sessionapi.ContextRequest
	if len(req.Body) > 0 {
		if err := json.Unmarshal(req.Body, &body); err != nil {
			return nil, err
		}
	}
	var result any
	switch req.Op {
	case sessionapi.OpContext:
		if _, taken := s.ctxs[body.Name]; taken {
			r.Error = sessionapi.Errorf(sessionapi.ErrExists, "context %q exists already", body.Name)
		} else if len(s.ctxs) >= sessionapi.MaxContexts {
			r.Error = sessionapi.Errorf(sessionapi.ErrLimit, "at most %d contexts", sessionapi.MaxContexts)
		} else {
			s.ctxs[body.Name] = sessionapi.Context{Name: body.Name, Language: body.Language, Cwd: body.Cwd}
			result = s.ctxs[body.Name]
		}
	case sessionapi.OpEndContext:
		if _, ok := s.ctxs[body.Name]; !ok {
			r.Error = sessionapi.Errorf(sessionapi.ErrNotFound, "no context %q", body.Name)
		}
		delete(s.ctxs, body.Name)
		result = struct{}{}
	case sessionapi.OpContexts:
		list := []sessionapi.Context{}
		for _, c := range s.ctxs {
			list = append(list, c)
		}
		result = list
	default:
		return s.idleSandbox.Do(context.Background(), req)
	}
	if r.Error == nil {
		var err error
		if r.Result, err = json.Marshal(result); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// The contexts' routes answer each of the agent's errors with its stable
// code, refuse a body they do not know before any call, and give another
// token's session, like one that does not exist, 404.
func TestSessionContextsRoutes(t *testing.T) {
	t.Parallel()
	b, _ := sessionBundleOn(t, sessionhost.Config{}, func() sessionhost.Sandbox {
		return &contextSandbox{idleSandbox: idleSandbox{done: make(chan struct{})}, ctxs: map[string]sessionapi.Context{}}
	})
	acme := b.tenant["acme"]
	var info sessions.Info
	createSession(t, b, acme, `{}`).decode(t, &info)
	base := "/v1/sessions/" + info.ID + "/contexts"
	post := func(token, body string) reply {
		return b.do(t, "POST", base, token, []byte(body), "Content-Type", "application/json")
	}

	var list gateway.ContextList
	if rep := b.do(t, "GET", base, acme, nil); rep.status != http.StatusOK {
		t.Fatalf("list: %d %s", rep.status, rep.body)
	} else if rep.decode(t, &list); list.Contexts == nil || len(list.Contexts) != 0 {
		t.Fatalf("a new session's contexts: %s, want []", rep.body)
	}
	var cx sessionapi.Context
	rep := post(acme, `{"name": "sh", "language": "bash", "cwd": "src"}`)
	if rep.status != http.StatusCreated {
		t.Fatalf("create: %d %s", rep.status, rep.body)
	}
	if rep.decode(t, &cx); cx.Name != "sh" || cx.Language != "bash" || cx.Cwd != "src" {
		t.Fatalf("created %+v, want sh, bash, src", cx)
	}
	for _, tc := range []struct {
		name, method, path, token, body string
		status                          int
		code                            gateway.Code
	}{
		{"a name taken", "POST", base, acme, `{"name": "sh", "language": "bash"}`, http.StatusConflict, gateway.CodeExists},
		{"an unknown field", "POST", base, acme, `{"name": "x", "lang": "bash"}`, http.StatusBadRequest, gateway.CodeInvalidJSON},
		{"not JSON", "POST", base, acme, `bash`, http.StatusBadRequest, gateway.CodeInvalidJSON},
		{"another tenant's session", "POST", base, b.tenant["globex"], `{"name": "y"}`, http.StatusNotFound, gateway.CodeNotFound},
		{"another tenant's list", "GET", base, b.tenant["globex"], "", http.StatusNotFound, gateway.CodeNotFound},
		{"no such session", "GET", "/v1/sessions/s-000000000000000000000000/contexts", acme, "", http.StatusNotFound, gateway.CodeNotFound},
		{"an end of no such context", "DELETE", base + "/nope", acme, "", http.StatusNotFound, gateway.CodeNotFound},
	} {
		var body []byte
		if tc.body != "" {
			body = []byte(tc.body)
		}
		rep := b.do(t, tc.method, tc.path, tc.token, body, "Content-Type", "application/json")
		if rep.status != tc.status || rep.errorCode() != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, rep.status, rep.body, tc.status, tc.code)
		}
	}
	for i := 1; i < sessionapi.MaxContexts; i++ {
		if rep := post(acme, `{"name": "c`+string(rune('a'+i))+`"}`); rep.status != http.StatusCreated {
			t.Fatalf("context %d: %d %s", i+1, rep.status, rep.body)
		}
	}
	if rep := post(acme, `{"name": "over"}`); rep.status != http.StatusTooManyRequests || rep.errorCode() != gateway.CodeTooManyRequests {
		t.Errorf("a context over the cap: %d %s, want 429 too_many_requests", rep.status, rep.body)
	}
	if rep := b.do(t, "DELETE", base+"/sh", acme, nil); rep.status != http.StatusNoContent {
		t.Fatalf("end: %d %s", rep.status, rep.body)
	}
	b.do(t, "GET", base, acme, nil).decode(t, &list)
	if len(list.Contexts) != sessionapi.MaxContexts-1 {
		t.Errorf("after an end, %d contexts listed, want %d", len(list.Contexts), sessionapi.MaxContexts-1)
	}
}
