package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// keepAliveServer is an HTTP/1.1 server that keeps its connections open
// between requests, as most dev servers do: what the gateway pools.
const keepAliveServer = `import http.server as h
h.test(HandlerClass=h.SimpleHTTPRequestHandler, protocol="HTTP/1.1", port=8000, bind="127.0.0.1")`

// originServer answers every request with headers that act on the whole
// origin (or site) of the page's URL rather than on the page: the
// gateway's, for a page it proxies.
const originServer = `import http.server as h
class H(h.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        for k, v in [("Clear-Site-Data", '"cookies", "storage", "cache"'), ("Strict-Transport-Security", "max-age=31536000; includeSubDomains"),
                     ("Alt-Svc", 'h2="elsewhere.example:443"'), ("Service-Worker-Allowed", "/"), ("Content-Length", "2")]:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(b"ok")
h.HTTPServer(("127.0.0.1", 8002), H).serve_forever()`

// Attacks on a session's ports by someone who holds a preview token (or
// the owner's token) and keeps using it after the owner stopped exposing
// the port: neither a connection the gateway keeps alive between
// requests nor a WebSocket open before the unexpose reaches the server
// after it, nor the preview token of the exposure before once the port
// is exposed again. And the spellings of a port number that name another
// port.
func TestSessionPortsUnexposeDocker(t *testing.T) {
	workertest.Sandbox(t, executor.Config{WorkerID: "probe"}) // Docker and the image answer, or skip
	script, err := os.ReadFile("testdata/portserver.py")
	if err != nil {
		t.Fatal(err)
	}
	natsURL, client, js := natsServer(t)
	wid := uniqueID("ports-unexpose")
	sessionWorker(t, natsURL, wid, "--runtime", "runc")
	api := startTenantAPI(t, natsURL, client, js, "acme")
	defer testutil.Eventually(t, 60*time.Second, "the session's container removed", func() bool {
		return len(containers(t, executor.LabelWorker+"="+wid)) == 0
	})

	var s sessions.Info
	if status, body := api.do(api.owner, "POST", "/v1/sessions", map[string]any{}); status != 201 || json.Unmarshal(body, &s) != nil {
		t.Fatalf("create: %d %s", status, body)
	}
	defer api.do(api.owner, "DELETE", "/v1/sessions/"+s.ID, nil)
	api.sh(api.owner, s.ID, "mkdir -p www && echo kept-alive > www/hello.txt")
	for name, src := range map[string]string{"keepalive.py": keepAliveServer, "portserver.py": string(script), "origin.py": originServer} {
		if status, body := api.do(api.owner, "POST", "/v1/sessions/"+s.ID+"/exec", map[string]any{"shell": "cat > " + name, "stdin": src}); status != 200 {
			t.Fatalf("write %s: %d %s", name, status, body)
		}
	}
	for _, cmd := range []string{"cd www && exec python3 ../keepalive.py", "exec python3 portserver.py 8001",
		"cd www && exec python3 -m http.server 8003 --bind 127.0.0.1", "exec python3 origin.py"} {
		if status, body := api.do(api.owner, "POST", "/v1/sessions/"+s.ID+"/exec", map[string]any{"shell": cmd, "background": true}); status != 200 {
			t.Fatalf("start %q: %d %s", cmd, status, body)
		}
	}
	base := api.base + "/v1/sessions/" + s.ID + "/ports/"
	expose := func(port int) gateway.PortInfo {
		t.Helper()
		var p gateway.PortInfo
		if status, body := api.do(api.owner, "POST", "/v1/sessions/"+s.ID+"/ports", map[string]any{"port": port}); status != 201 || json.Unmarshal(body, &p) != nil {
			t.Fatalf("expose %d: %d %s", port, status, body)
		}
		return p
	}
	p8000, p8001 := expose(8000), expose(8001)
	get := func(u, preview string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "GET", u, nil)
		req.Header.Set("X-Sandfleet-Preview-Token", preview)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	testutil.Eventually(t, 60*time.Second, "the keep-alive server up through the gateway", func() bool {
		status, body := get(base+"8000/hello.txt", p8000.Token)
		return status == 200 && body == "kept-alive\n"
	})
	testutil.Eventually(t, 60*time.Second, "the echo server up", func() bool {
		status, _ := get(base+"8001/x", p8001.Token)
		return status == 200
	})

	// A page's server sets nothing on the gateway's origin: no cookie
	// (dropped before), and none of the headers that clear its site's
	// data, pin it to HTTPS, send it elsewhere or widen a service
	// worker's scope.
	p8002 := expose(8002)
	var hdr http.Header
	testutil.Eventually(t, 60*time.Second, "the origin server up", func() bool {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", base+"8002/", nil)
		req.Header.Set("X-Sandfleet-Preview-Token", p8002.Token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		res.Body.Close()
		hdr = res.Header
		return res.StatusCode == 200
	})
	for _, h := range []string{"Clear-Site-Data", "Strict-Transport-Security", "Alt-Svc", "Service-Worker-Allowed"} {
		if v := hdr.Get(h); v != "" {
			t.Errorf("a session's server set %s on the gateway's origin: %q", h, v)
		}
	}

	// The spellings of a port number: none names 8003 (listening, never
	// exposed) or any port at all.
	for _, p := range []string{"+8003", "08003", "8003abc", "8003%00", "65536", "0", "-1", "%2B8003", "8003.0", "0x1f43", " 8003"} {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", base+p+"/hello.txt", nil)
		req.Header.Set("Authorization", "Bearer "+api.owner)
		if res, err := http.DefaultClient.Do(req); err == nil {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 404 || strings.Contains(string(b), "kept-alive") {
				t.Errorf("port %q: %d %.200s, want 404", p, res.StatusCode, b)
			}
		}
	}

	// A WebSocket open before the unexpose.
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"8001/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"X-Sandfleet-Preview-Token": {p8001.Token}}})
	if err != nil {
		t.Fatalf("WebSocket: %v", err)
	}
	defer ws.CloseNow()
	if err := ws.Write(ctx, websocket.MessageText, []byte("before")); err != nil {
		t.Fatal(err)
	}
	if _, got, err := ws.Read(ctx); err != nil || string(got) != "before" {
		t.Fatalf("the echo before: %q %v", got, err)
	}

	for _, port := range []string{"8000", "8001"} {
		if status, body := api.do(api.owner, "DELETE", "/v1/sessions/"+s.ID+"/ports/"+port, nil); status != 204 {
			t.Fatalf("unexpose %s: %d %s", port, status, body)
		}
	}
	// The gateway's idle connection to 8000 is no way in any more.
	for i := range 3 {
		if status, body := get(base+"8000/hello.txt", p8000.Token); status != 404 || strings.Contains(body, "kept-alive") {
			t.Errorf("request %d after the unexpose: %d %.200s, want 404", i, status, body)
		}
	}
	// Nor the WebSocket: it ends, rather than echo.
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := ws.Write(wctx, websocket.MessageText, []byte("after")); err == nil {
		if _, got, err := ws.Read(wctx); err == nil {
			t.Errorf("a WebSocket opened before the unexpose still echoes after it: %q", got)
		}
	}

	// Exposed again, the port's new token reaches the server, and the
	// token of the exposure before stays refused.
	again := expose(8000)
	if status, body := get(base+"8000/hello.txt", again.Token); status != 200 || body != "kept-alive\n" {
		t.Errorf("the token of the port's second exposure: %d %.200s, want the file", status, body)
	}
	if status, body := get(base+"8000/hello.txt", p8000.Token); status != 404 || strings.Contains(body, "kept-alive") {
		t.Errorf("the token of the port's first exposure, after it is exposed again: %d %.200s, want 404", status, body)
	}
}
