package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/sessionhost"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// refusingSandbox is a sandbox where nothing listens: its agent answers
// a connection's open as the launcher does then, ErrFailed.
type refusingSandbox struct{ idleSandbox }

func (s *refusingSandbox) Do(ctx context.Context, req *envelope.Request) (*envelope.Reply, error) {
	if req.Op != envelope.OpConnOpen {
		return s.idleSandbox.Do(ctx, req)
	}
	return &envelope.Reply{ID: req.ID, Error: sessionapi.Errorf(sessionapi.ErrFailed, "nothing answers on port %d in the sandbox", req.Port)}, nil
}

// portsBundle is a gateway over a session host whose sandboxes have no
// server: a request that gets past the gateway's and the host's checks
// reaches the sandbox, which fails it (502); one refused before is 404.
func portsBundle(t *testing.T) (*bundle, string, string) {
	t.Helper()
	b, _ := sessionBundleOn(t, sessionhost.Config{}, func() sessionhost.Sandbox {
		return &refusingSandbox{idleSandbox{done: make(chan struct{})}}
	})
	acme := b.tenant["acme"]
	var info sessions.Info
	createSession(t, b, acme, `{}`).decode(t, &info)
	return b, acme, "/v1/sessions/" + info.ID + "/ports"
}

func expose(t *testing.T, b *bundle, token, base, body string) gateway.PortInfo {
	t.Helper()
	rep := b.do(t, "POST", base, token, []byte(body), "Content-Type", "application/json")
	if rep.status != http.StatusCreated {
		t.Fatalf("expose %s: %d %s", body, rep.status, rep.body)
	}
	var p gateway.PortInfo
	rep.decode(t, &p)
	return p
}

// A preview token is good for the exposure it was made for: once its port
// is unexposed, exposing the port again does not bring the old token
// back (404, as for a port never exposed), while the new one reaches the
// sandbox.
func TestPreviewTokenEndsWithItsExposure(t *testing.T) {
	t.Parallel()
	b, acme, base := portsBundle(t)
	old := expose(t, b, acme, base, `{"port": 8000}`)
	fetch := func(tok string) reply {
		return b.do(t, "GET", base+"/8000/", "", nil, "X-Sandfleet-Preview-Token", tok)
	}
	if rep := fetch(old.Token); rep.status != http.StatusBadGateway {
		t.Fatalf("the first exposure's token: %d %s, want 502 from the sandbox", rep.status, rep.body)
	}
	if rep := b.do(t, "DELETE", base+"/8000", acme, nil); rep.status != http.StatusNoContent {
		t.Fatalf("unexpose: %d %s", rep.status, rep.body)
	}
	again := expose(t, b, acme, base, `{"port": 8000}`)
	if rep := fetch(old.Token); rep.status != http.StatusNotFound || rep.errorCode() != gateway.CodeNotFound {
		t.Errorf("the first exposure's token after the port is exposed again: %d %s, want 404", rep.status, rep.body)
	}
	if rep := fetch(again.Token); rep.status != http.StatusBadGateway {
		t.Errorf("the second exposure's token: %d %s, want 502 from the sandbox", rep.status, rep.body)
	}
	// Exposing a port exposed already keeps its exposure: both tokens of it are good.
	same := expose(t, b, acme, base, `{"port": 8000}`)
	for _, tok := range []string{again.Token, same.Token} {
		if rep := fetch(tok); rep.status != http.StatusBadGateway {
			t.Errorf("a token of the current exposure: %d %s, want 502 from the sandbox", rep.status, rep.body)
		}
	}
	if rep := b.do(t, "GET", base+"/8000/", acme, nil); rep.status != http.StatusBadGateway {
		t.Errorf("the owner's token: %d %s, want 502 from the sandbox", rep.status, rep.body)
	}
}

// An expose with a wait answers 504 gateway_timeout when nothing accepts
// on the port within it, after about that long; a wait out of bounds is
// 400 before anything is exposed.
func TestExposeWait(t *testing.T) {
	t.Parallel()
	b, acme, base := portsBundle(t)
	start := time.Now()
	rep := b.do(t, "POST", base, acme, []byte(`{"port": 8000, "wait": "500ms"}`), "Content-Type", "application/json")
	if took := time.Since(start); rep.status != http.StatusGatewayTimeout || rep.errorCode() != gateway.CodeGatewayTimeout || took < 500*time.Millisecond || took > 10*time.Second {
		t.Errorf("a wait for a port nothing listens on: %d %s after %s, want 504 gateway_timeout after 500ms", rep.status, rep.body, took)
	}
	for _, w := range []string{`"1h"`, `"-1s"`, `"soon"`, `10`} {
		rep := b.do(t, "POST", base, acme, []byte(`{"port": 8001, "wait": `+w+`}`), "Content-Type", "application/json")
		if rep.status != http.StatusBadRequest {
			t.Errorf("wait %s: %d %s, want 400", w, rep.status, rep.body)
		}
	}
	var list struct{ Ports []gateway.PortInfo }
	b.do(t, "GET", base, acme, nil).decode(t, &list)
	if len(list.Ports) != 1 || list.Ports[0].Port != 8000 {
		t.Errorf("ports %+v, want 8000 alone", list.Ports)
	}
}

// The MCP tool expose_port (here through POST /v1/tools/expose_port, the
// same handler as /mcp's) exposes the port as its caller and answers with
// the port's URL on the gateway and a preview URL whose token lets a
// request without credentials in; another tenant's call is refused.
func TestExposePortTool(t *testing.T) {
	t.Parallel()
	b, acme, base := portsBundle(t)
	id := strings.TrimSuffix(strings.TrimPrefix(base, "/v1/sessions/"), "/ports")
	call := func(token, args string) (text string, isError bool) {
		rep := b.do(t, "POST", "/v1/tools/expose_port", token, []byte(args), "Content-Type", "application/json")
		var res struct {
			Content []struct{ Text string }
			IsError bool
		}
		if rep.status != http.StatusOK || json.Unmarshal(rep.body, &res) != nil || len(res.Content) != 1 {
			t.Fatalf("expose_port %s: %d %s", args, rep.status, rep.body)
		}
		return res.Content[0].Text, res.IsError
	}
	text, isErr := call(acme, `{"session": "`+id+`", "port": 8000}`)
	fields := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		k, v, _ := strings.Cut(line, ": ")
		fields[k] = v
	}
	if isErr || fields["url"] != b.url+base+"/8000/" || !strings.HasPrefix(fields["preview url"], fields["url"]+"?sandfleet_preview=") || fields["expires at"] == "" {
		t.Fatalf("expose_port: isError %v, %q", isErr, text)
	}
	// The preview URL alone, no token: past the gateway's checks to the sandbox.
	if rep := b.do(t, "GET", strings.TrimPrefix(fields["preview url"], b.url), "", nil); rep.status != http.StatusBadGateway {
		t.Errorf("the preview URL: %d %s, want 502 from the sandbox", rep.status, rep.body)
	}
	var list struct{ Ports []gateway.PortInfo }
	b.do(t, "GET", base, acme, nil).decode(t, &list)
	if len(list.Ports) != 1 || list.Ports[0].Port != 8000 {
		t.Errorf("ports after expose_port: %+v, want 8000", list.Ports)
	}
	if text, isErr := call(b.tenant["globex"], `{"session": "`+id+`", "port": 8001}`); !isErr || !strings.Contains(text, "not_found") {
		t.Errorf("another tenant's expose_port: isError %v, %q; want not_found", isErr, text)
	}
	if text, isErr := call(acme, `{"session": "`+id+`", "port": 8002, "wait": 0.3}`); !isErr || !strings.Contains(text, "gateway_timeout") {
		t.Errorf("expose_port waiting for a port nothing listens on: isError %v, %q; want gateway_timeout", isErr, text)
	}
	if text, isErr := call(acme, `{"session": "`+id+`", "port": 80}`); !isErr {
		t.Errorf("expose_port of port 80: %q, want an error", text)
	}
}
