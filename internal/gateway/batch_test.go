package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/testutil"
)

func readEvents(t *testing.T, body []byte) []gateway.BatchEvent {
	t.Helper()
	var evs []gateway.BatchEvent
	for line := range strings.SplitSeq(strings.TrimSpace(string(body)), "\n") {
		var ev gateway.BatchEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// A batch streams one event per result and per bad line, then its
// summary; sent again it reuses every stored result.
func TestBatch(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	b := setup(t, options{})
	input := strings.Join([]string{
		`{"image":"python","code":"print one"}`,
		`not json`,
		`{"image":"python","code":"exit 2"}`,
		`{"queue":"default","image":"python","code":"print x"}`,
		`{"image":"python","code":"print r","reply_to":"results.x"}`,
	}, "\n")
	path := "/v1/batches?name=nightly&window=4"
	r := apiCase{method: "POST", path: path, token: b.alice, body: input, status: 200, docRefuses: true,
		header: []string{"Content-Type", "application/x-ndjson"}}.run(t, b, doc)
	if ct := r.header.Get("Content-Type"); ct != "application/x-ndjson" || r.header.Get("X-Sandfleet-Batch") != "nightly" {
		t.Errorf("Content-Type %q, batch %q", ct, r.header.Get("X-Sandfleet-Batch"))
	}
	evs := readEvents(t, r.body)
	got := map[int]string{}
	for _, ev := range evs[:len(evs)-1] {
		switch {
		case ev.Result != nil:
			got[ev.Line] = string(ev.Result.Status)
			if ev.Result.Labels[gateway.TokenLabel] != "alice" || !strings.HasPrefix(ev.Result.ID, "nightly-") {
				t.Errorf("line %d: id %s labels %v", ev.Line, ev.Result.ID, ev.Result.Labels)
			}
		case ev.Error != nil:
			got[ev.Line] = string(ev.Error.Code)
		default:
			t.Errorf("event %+v: neither result nor bad line", ev)
		}
	}
	want := map[int]string{1: "succeeded", 2: "invalid_job", 3: "failed", 4: "succeeded", 5: "invalid_job"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("lines %v, want %v", got, want)
	}
	sum := evs[len(evs)-1].Summary
	if sum == nil || sum.Total != 3 || sum.Done != 3 || sum.Bad != 2 || sum.Reused != 0 {
		t.Fatalf("last event %+v, want the summary", evs[len(evs)-1])
	}

	// The same body again: nothing runs twice.
	runs := b.exec.Total()
	r = b.do(t, "POST", path, b.alice, []byte(input))
	evs = readEvents(t, r.body)
	if sum := evs[len(evs)-1].Summary; sum == nil || sum.Reused != 3 || b.exec.Total() != runs {
		t.Errorf("second run: summary %+v, %d new runs; want 3 reused, none run", sum, b.exec.Total()-runs)
	}

	// bob's token may use the default queue only: other lines are bad.
	r = b.do(t, "POST", "/v1/batches", b.bob, []byte(`{"queue":"parked","image":"python","code":"print x"}`+"\n"+`{"image":"python","code":"print y"}`))
	evs = readEvents(t, r.body)
	if len(evs) != 3 || evs[0].Error == nil || evs[0].Error.Code != gateway.CodeForbidden || evs[1].Result == nil {
		t.Errorf("bob's batch: %s", r.body)
	}
}

// A strict batch with bad lines is refused whole: 400 with the lines.
func TestBatchStrict(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	b := setup(t, options{})
	r := apiCase{method: "POST", path: "/v1/batches?strict=true", token: b.alice, status: 400, code: gateway.CodeInvalidBatch, docRefuses: true,
		header: []string{"Content-Type", "application/x-ndjson"},
		body:   `{"image":"python","code":"print a"}` + "\n{oops\n"}.run(t, b, doc)
	var e struct{ Error gateway.ErrorBody }
	r.decode(t, &e)
	if len(e.Error.BadLines) != 1 || e.Error.BadLines[0].Line != 2 || b.exec.Total() != 0 {
		t.Errorf("%s; %d runs", r.body, b.exec.Total())
	}
	apiCase{method: "POST", path: "/v1/batches?window=0", token: b.alice, body: "{}", status: 400, code: gateway.CodeInvalidRequest, docRefuses: true,
		header: []string{"Content-Type", "application/x-ndjson"}}.run(t, b, doc)
	apiCase{method: "POST", path: "/v1/batches?name=a.b", token: b.alice, body: "{}", status: 400, code: gateway.CodeInvalidRequest, docRefuses: true,
		header: []string{"Content-Type", "application/x-ndjson"}}.run(t, b, doc)
}

// Clients that leave in the middle of a batch stream or of a long poll
// leave nothing behind: once their jobs are done, the process has the
// goroutines it had before, and the gateway's slots are free.
func TestClientLeavesMidStream(t *testing.T) {
	t.Parallel()
	var errs testutil.Buffer // a client that leaves is no error of the gateway's
	b := setup(t, options{cfg: gateway.Config{Logger: slog.New(slog.NewTextHandler(&errs, &slog.HandlerOptions{Level: slog.LevelError}))}})
	settle := func() int {
		// Idle connections of the test's client hold goroutines too.
		http.DefaultClient.CloseIdleConnections()
		var n int
		testutil.Eventually(t, 20*time.Second, "fleet idle", func() bool {
			st, err := b.client.Status(t.Context())
			return err == nil && st.Messages == 0
		})
		n = runtime.NumGoroutine()
		return n
	}
	// Warm up: one batch and one long poll through the same paths, so
	// that what they start once per process (watchers, pools) is there.
	b.do(t, "POST", "/v1/batches", b.alice, []byte(`{"image":"python","code":"print w"}`))
	b.submit(t, `{"image":"python","code":"print w"}`, "5s")
	before := settle()

	for round := range 3 {
		var lines []string
		for i := range 40 {
			lines = append(lines, fmt.Sprintf(`{"image":"python","code":"sleep %dms\nprint %d"}`, 20*(i%5), round*100+i))
		}
		req, _ := http.NewRequestWithContext(t.Context(), "POST", b.url+"/v1/batches?window=8", strings.NewReader(strings.Join(lines, "\n")))
		req.Header.Set("Authorization", "Bearer "+b.alice)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		if !sc.Scan() {
			t.Fatal("no first line")
		}
		resp.Body.Close() // mid-stream: the connection is closed

		// A follower of a running job that leaves after its first event.
		id := fmt.Sprintf("sse-%d", round)
		b.submit(t, `{"id":"`+id+`","image":"python","code":"print first\nsleep 1s\nprint second"}`, "")
		req, _ = http.NewRequestWithContext(t.Context(), "GET", b.url+"/v1/jobs/"+id+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+b.alice)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if sc := bufio.NewScanner(resp.Body); !sc.Scan() {
			t.Fatal("no first event")
		}
		resp.Body.Close()

		// And a long poll whose client gives up.
		cl := &http.Client{Timeout: 100 * time.Millisecond}
		req, _ = http.NewRequest("POST", b.url+"/v1/jobs?wait=30s", strings.NewReader(`{"image":"python","code":"sleep 500ms"}`))
		req.Header.Set("Authorization", "Bearer "+b.alice)
		if resp, err := cl.Do(req); err == nil {
			resp.Body.Close()
			t.Fatal("the long poll answered within 100ms")
		}
	}
	testutil.Eventually(t, 20*time.Second, "the gateway's requests end", func() bool {
		return gaugeValue(t, b, "sandfleet_gateway_requests_in_flight") == 1 && // this scrape
			gaugeValue(t, b, `sandfleet_gateway_slots_busy{kind="batch"}`) == 0 &&
			gaugeValue(t, b, `sandfleet_gateway_slots_busy{kind="waiting"}`) == 0
	})
	var after int
	// The in-process server's goroutines count too: the ordered consumer
	// of a watch the gateway stopped goes when the server removes it,
	// which on a loaded machine took 40 s. A leak of the gateway's never
	// goes.
	deadline := time.Now().Add(90 * time.Second)
	for {
		after = settle()
		if after <= before+2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("goroutines: %d before, %d after 3 abandoned batches, event streams and long polls", before, after)
	if after > before+2 {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d before, %d after: a leak\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
	// The jobs an abandoned batch published go on in the fleet (settle
	// waited for the stream to drain); each round had one result read.
	if n := b.exec.Total(); n < 2+3 {
		t.Errorf("%d runs", n)
	}
	if errs.String() != "" {
		t.Errorf("the gateway logged errors:\n%s", errs.String())
	}
}

// A client that sends a batch's headers and then stalls its body holds
// an upload slot, not the batch slot: with one batch slot, a real batch
// sent meanwhile runs.
func TestStalledBatchBodyHoldsNoBatchSlot(t *testing.T) {
	t.Parallel()
	b := setup(t, options{cfg: gateway.Config{MaxBatches: 1}})
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/batches HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100000\r\n\r\n{", b.alice)
	testutil.Eventually(t, 10*time.Second, "the stalled body uploading", func() bool {
		return gaugeValue(t, b, `sandfleet_gateway_slots_busy{kind="upload"}`) == 1
	})
	r := b.do(t, "POST", "/v1/batches", b.alice, []byte(`{"image":"python","code":"print 1"}`+"\n"))
	if r.status != 200 || !strings.Contains(string(r.body), `"succeeded"`) {
		t.Fatalf("a real batch while another's body stalls: %d %s", r.status, r.body)
	}
}
