package gateway_test

import (
	"bufio"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/testutil"
)

// sse is one Server-Sent Event as read off the wire.
type sse struct{ name, id, data string }

// followSSE reads the events of GET /v1/jobs/{id}/events until the
// stream ends, sending each as it arrives.
func followSSE(t *testing.T, b *bundle, id, lastID string, out chan<- sse) {
	t.Helper()
	followSSEAs(t, b, b.alice, id, lastID, out)
}

// followSSEAs is followSSE with token.
func followSSEAs(t *testing.T, b *bundle, token, id, lastID string, out chan<- sse) {
	t.Helper()
	defer close(out)
	req, _ := http.NewRequestWithContext(t.Context(), "GET", b.url+"/v1/jobs/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("events of %s: %d", id, resp.StatusCode)
		return
	}
	var ev sse
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ": ")
		switch k {
		case "event":
			ev.name = v
		case "id":
			ev.id = v
		case "data":
			ev.data = v
		case "":
			out <- ev
			ev = sse{}
		}
	}
}

// A follower of a running job sees its output as it is printed, before
// the job ends; one that comes back with Last-Event-ID gets only what
// came after that event, ending with the result.
func TestEventsFollowAndResume(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	release := filepath.Join(t.TempDir(), "go")
	b.submit(t, `{"id":"live-1","image":"python","code":"print one\nwaitfile `+release+`\nprint two"}`, "")
	events := make(chan sse, 64)
	go followSSE(t, b, "live-1", "", events)

	var firstOut sse
	for ev := range events {
		if ev.name == "finished" {
			t.Fatal("finished before its first line was seen")
		}
		if ev.name == "stdout" {
			firstOut = ev
			break
		}
	}
	if !strings.Contains(firstOut.data, `"text":"one\n"`) || firstOut.id == "" {
		t.Fatalf("first output event %+v, want the line one with a sequence", firstOut)
	}
	// The job is still blocked on its file: the line came live.
	if r := b.do(t, "GET", "/v1/jobs/live-1", b.alice, nil); r.status != 202 {
		t.Fatalf("live-1: %d %s, want 202 while it runs", r.status, r.body)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	resumed := collectSSE(t, b, "live-1", firstOut.id)
	var names []string
	for _, ev := range resumed {
		names = append(names, ev.name)
		if ev.name == "stdout" && strings.Contains(ev.data, `"text":"one\n"`) {
			t.Errorf("resumed after event %s but got the line before it again", firstOut.id)
		}
	}
	// Neither queued again (it came before all the client saw) nor an end
	// without finished, which would make an EventSource reconnect for ever.
	if len(names) == 0 || names[len(names)-1] != "finished" || !strings.Contains(strings.Join(names, " "), "stdout") ||
		strings.Contains(strings.Join(names, " "), "queued") {
		t.Errorf("resumed events %v, want the second line and finished last, no queued", names)
	}
	if fin := resumed[len(resumed)-1]; fin.id != "" {
		again := collectSSE(t, b, "live-1", fin.id)
		if len(again) != 1 || again[0].name != "finished" {
			t.Errorf("resumed after the finished event: %v, want finished alone", again)
		}
	}
}

// collectSSE follows a job's events (after lastID) until the stream ends.
func collectSSE(t *testing.T, b *bundle, id, lastID string) []sse {
	t.Helper()
	ch := make(chan sse, 64)
	go followSSE(t, b, id, lastID, ch)
	var out []sse
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatalf("the stream of %s did not end: %v", id, out)
		}
	}
}

// Event streams hold a slot each, for as long as their job runs: past
// MaxStreams the next is 429, and the slots come back when the job ends.
func TestEventStreamsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, options{cfg: gateway.Config{MaxStreams: 2}})
	release := filepath.Join(t.TempDir(), "go")
	b.submit(t, `{"id":"parked","image":"python","code":"waitfile `+release+`\nprint done"}`, "")
	var streams []chan sse
	for range 2 {
		ch := make(chan sse, 64)
		go followSSE(t, b, "parked", "", ch)
		streams = append(streams, ch)
	}
	testutil.Eventually(t, 10*time.Second, "two streams open", func() bool {
		return gaugeValue(t, b, `sandfleet_gateway_slots_busy{kind="streams"}`) == 2
	})
	if r := b.do(t, "GET", "/v1/jobs/parked/events", b.alice, nil); r.status != 429 || r.errorCode() != gateway.CodeTooManyRequests {
		t.Fatalf("a third stream: %d %s, want 429 too_many_requests", r.status, r.body)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ch := range streams {
		var last sse
		for ev := range ch {
			last = ev
		}
		if last.name != "finished" {
			t.Errorf("a stream ended on %q, not finished", last.name)
		}
	}
	testutil.Eventually(t, 10*time.Second, "the slots back", func() bool {
		return gaugeValue(t, b, `sandfleet_gateway_slots_busy{kind="streams"}`) == 0
	})
}

// One token holding its most event streams leaves the others theirs: a
// second token still gets a stream, and the first token's next one is
// 429 too_many_requests with Retry-After, though the gateway has room.
func TestEventStreamsPerToken(t *testing.T) {
	t.Parallel()
	b := setup(t, options{cfg: gateway.Config{MaxStreams: 4, MaxStreamsPerToken: 2}})
	release := filepath.Join(t.TempDir(), "go")
	b.submit(t, `{"id":"parked","image":"python","code":"waitfile `+release+`\nprint done"}`, "")
	var streams []chan sse
	open := func(token string) {
		ch := make(chan sse, 64)
		go followSSEAs(t, b, token, "parked", "", ch)
		streams = append(streams, ch)
	}
	open(b.alice)
	open(b.alice)
	testutil.Eventually(t, 10*time.Second, "alice's two streams open", func() bool {
		return gaugeValue(t, b, `sandfleet_gateway_slots_busy{kind="streams"}`) == 2
	})
	open(b.bob)
	testutil.Eventually(t, 10*time.Second, "bob's stream open beside them", func() bool {
		return gaugeValue(t, b, `sandfleet_gateway_slots_busy{kind="streams"}`) == 3
	})
	if ev := <-streams[2]; ev.name == "" {
		t.Fatal("bob's stream ended without an event")
	}
	r := b.do(t, "GET", "/v1/jobs/parked/events", b.alice, nil)
	if r.status != 429 || r.errorCode() != gateway.CodeTooManyRequests || r.header.Get("Retry-After") == "" {
		t.Fatalf("alice's third stream: %d %s (Retry-After %q), want 429 too_many_requests", r.status, r.body, r.header.Get("Retry-After"))
	}
	if !strings.Contains(string(r.body), `token \"alice\"`) {
		t.Errorf("the 429 does not name the token's bound: %s", r.body)
	}
	if n := gaugeValue(t, b, `sandfleet_gateway_slots_refused_total{bound="token",kind="streams"}`); n != 1 {
		t.Errorf("refused by the token's bound: %v, want 1", n)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ch := range streams {
		var last sse
		for ev := range ch {
			last = ev
		}
		if last.name != "finished" {
			t.Errorf("a stream ended on %q, not finished", last.name)
		}
	}
	testutil.Eventually(t, 10*time.Second, "the slots back", func() bool {
		return gaugeValue(t, b, `sandfleet_gateway_slots_busy{kind="streams"}`) == 0
	})
	// Its streams ended, the token has its allowance back.
	if r := b.do(t, "GET", "/v1/jobs/parked/events", b.alice, nil); r.status != 200 {
		t.Errorf("alice's stream once hers ended: %d %s", r.status, r.body)
	}
}
