package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// A session's terminal over the API's WebSocket on real Docker: what a
// client types runs in a shell on a pty and its output comes back as
// binary frames; a resize (a text frame) changes what `stty size` says;
// `exit 3` ends it with a text frame naming the status and a normal
// close. A page of another site is refused before any shell starts, and
// an unknown session is the API's 404.
func TestSessionPTYOverWebSocketDocker(t *testing.T) {
	t.Parallel()
	w := startAPIWorker(t, pythonSandbox(t, runID("pty")), "p1", "--slots", "1", "--pool", "0", "--sessions", "1")
	w.sessionsUp(t)
	api, addr := w.api, w.addr
	var info sessions.Info
	api.do("POST", "/v1/sessions", map[string]any{"image": "python"}, 201, &info)
	url := "ws://" + addr + "/v1/sessions/" + info.ID + "/pty?cols=80&rows=24"

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if _, res, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"http://evil.example"}}}); err == nil || res == nil || res.StatusCode != http.StatusForbidden {
		t.Fatalf("another site's page: %v %v", res, err)
	}
	if _, res, err := websocket.Dial(ctx, "ws://"+addr+"/v1/sessions/s-nope/pty", nil); err == nil || res == nil || res.StatusCode != http.StatusNotFound {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("an unknown session: %v %v %s", res, err, b)
	}

	conn, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	var out strings.Builder
	readUntil := func(want string) {
		t.Helper()
		for !strings.Contains(out.String(), want) {
			typ, data, err := conn.Read(ctx)
			if err != nil {
				t.Fatalf("waiting for %q: %v; the terminal said %q", want, err, out.String())
			}
			if typ != websocket.MessageBinary {
				t.Fatalf("a %v frame %q before %q", typ, data, want)
			}
			out.Write(data)
		}
	}
	send := func(typ websocket.MessageType, b string) {
		t.Helper()
		if err := conn.Write(ctx, typ, []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	send(websocket.MessageBinary, "echo hel''lo\n")
	readUntil("hello\r\n")
	send(websocket.MessageText, `{"cols": 120, "rows": 40}`)
	send(websocket.MessageBinary, "stty size\n")
	readUntil("40 120\r\n")
	send(websocket.MessageBinary, "exit 3\n")
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("the end: %v", err)
		}
		if typ == websocket.MessageText {
			var end sessions.PTYExit
			if err := json.Unmarshal(data, &end); err != nil || end.ExitCode == nil || *end.ExitCode != 3 {
				t.Fatalf("the end: %s", data)
			}
			break
		}
	}
	if _, _, err := conn.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("after the end: %v", err)
	}
}
