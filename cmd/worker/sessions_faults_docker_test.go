package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// rawCall is one HTTP request with headers, answered with its status,
// headers and body.
func rawCall(t *testing.T, method, url, key string, body any) (int, http.Header, []byte) {
	t.Helper()
	data, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(t.Context(), method, url, bytes.NewReader(data))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, b
}

// The faults a user of sessions meets, over HTTP on real Docker: limits
// over the worker's caps are 400 naming the field; a worker whose
// sessions are all taken answers a create with 429 and Retry-After, and
// takes one again once a session is deleted; an exec retried with the
// same Idempotency-Key while the first still runs runs once.
func TestSessionsFaultsDocker(t *testing.T) {
	t.Parallel()
	w := startAPIWorker(t, pythonSandbox(t, runID("sessf")), "f1", "--slots", "1", "--pool", "0", "--sessions", "1")
	w.sessionsUp(t)
	api := w.api

	code, _, body := rawCall(t, "POST", api.base+"/v1/sessions", "", map[string]any{"limits": map[string]any{"memory": "512g"}})
	if code != 400 || !strings.Contains(string(body), "memory") {
		t.Errorf("limits over the caps: %d %s, want 400 naming memory", code, body)
	}

	var first sessions.Info
	api.do("POST", "/v1/sessions", map[string]any{"image": "python"}, 201, &first)
	code, hdr, body := rawCall(t, "POST", api.base+"/v1/sessions", "", map[string]any{"image": "python"})
	if code != 429 || hdr.Get("Retry-After") == "" {
		t.Errorf("a create over the worker's --sessions 1: %d Retry-After %q %s, want 429 with Retry-After", code, hdr.Get("Retry-After"), body)
	}

	// The same exec twice at once, with one key: whichever comes first
	// runs, the other gets its answer.
	p := "/v1/sessions/" + first.ID
	run := map[string]any{"shell": "echo ran >> runs.log; sleep 1; echo done"}
	var wg sync.WaitGroup
	answers := make([]string, 2)
	for i := range 2 {
		wg.Go(func() {
			code, _, body := rawCall(t, "POST", api.base+p+"/exec", "retry-1", run)
			answers[i] = fmt.Sprintf("%d %s", code, body)
		})
	}
	wg.Wait()
	if answers[0] != answers[1] || !strings.HasPrefix(answers[0], "200 ") {
		t.Errorf("the two answers: %q and %q, want one, twice", answers[0], answers[1])
	}
	if got := api.do("GET", p+"/files/runs.log", nil, 200, nil); string(got) != "ran\n" {
		t.Errorf("runs.log after an exec sent twice with one key: %q, want one line", got)
	}
	// Once the retry's answer is kept, a later retry gets it too.
	if code, _, body := rawCall(t, "POST", api.base+p+"/exec", "retry-1", run); fmt.Sprintf("%d %s", code, body) != answers[0] {
		t.Errorf("a later retry: %d %s", code, body)
	}
	if got := api.do("GET", p+"/files/runs.log", nil, 200, nil); string(got) != "ran\n" {
		t.Errorf("runs.log after a later retry: %q, want one line", got)
	}

	api.do("DELETE", p, nil, 200, nil)
	var second sessions.Info
	testutil.Eventually(t, 30*time.Second, "a create after the delete", func() bool {
		code, _, body := rawCall(t, "POST", api.base+"/v1/sessions", "", map[string]any{"image": "python"})
		if code == 201 {
			_ = json.Unmarshal(body, &second)
		}
		return code == 201
	})
	api.do("DELETE", "/v1/sessions/"+second.ID, nil, 200, nil)
}
