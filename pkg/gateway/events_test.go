package gateway_test

import (
	"bufio"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sse is one Server-Sent Event as read off the wire.
type sse struct{ name, id, data string }

// followSSE reads the events of GET /v1/jobs/{id}/events until the
// stream ends, sending each as it arrives.
func followSSE(t *testing.T, b *bundle, id, lastID string, out chan<- sse) {
	t.Helper()
	defer close(out)
	req, _ := http.NewRequestWithContext(t.Context(), "GET", b.url+"/v1/jobs/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+b.alice)
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

	resumed := make(chan sse, 64)
	go followSSE(t, b, "live-1", firstOut.id, resumed)
	var names []string
	timeout := time.After(20 * time.Second)
	for done := false; !done; {
		select {
		case ev, ok := <-resumed:
			if !ok {
				done = true
				break
			}
			names = append(names, ev.name)
			if ev.name == "stdout" && strings.Contains(ev.data, `"text":"one\n"`) {
				t.Errorf("resumed after event %s but got the line before it again", firstOut.id)
			}
		case <-timeout:
			t.Fatalf("resumed stream did not end: %v", names)
		}
	}
	if len(names) == 0 || names[len(names)-1] != "finished" || !strings.Contains(strings.Join(names, " "), "stdout") {
		t.Errorf("resumed events %v, want the second line and finished last", names)
	}
}
