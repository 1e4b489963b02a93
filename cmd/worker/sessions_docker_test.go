package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// httpCall is one request of a test to the API.
type httpCall struct {
	t    *testing.T
	base string
}

func (c httpCall) do(method, path string, body any, want int, out any) []byte {
	c.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, _ := json.Marshal(b)
		rd = bytes.NewReader(data)
	}
	req, _ := http.NewRequestWithContext(c.t.Context(), method, c.base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		c.t.Fatalf("%s %s: %d %s, want %d", method, path, res.StatusCode, data, want)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			c.t.Fatalf("%s %s: %v in %s", method, path, err, data)
		}
	}
	return data
}

// An agent's session over HTTP on real Docker, as `make run` serves it:
// state kept across cells, files written by one call read by a command,
// a background server started and queried from a later call, a cell that
// raises keeps its context; another token's view of it is 404, and once
// deleted it is 410 with why.
func TestSessionsOverHTTPDocker(t *testing.T) {
	t.Parallel()
	w := startAPIWorker(t, pythonSandbox(t, runID("sess")), "s1", "--slots", "1", "--pool", "0", "--sessions", "2")
	w.sessionsUp(t)
	api := w.api

	var info sessions.Info
	api.do("POST", "/v1/sessions", map[string]any{"image": "python", "idle_timeout": "2m"}, 201, &info)
	if info.Status != sessions.StatusRunning || info.Worker != "s1" || info.ID == "" {
		t.Fatalf("created: %+v", info)
	}
	p := "/v1/sessions/" + info.ID
	calls := 1
	code := func(src string) sessions.CodeResult {
		t.Helper()
		var r sessions.CodeResult
		api.do("POST", p+"/code", map[string]any{"code": src}, 200, &r)
		calls++
		return r
	}
	exec1 := func(req map[string]any) sessionapi.ExecResult {
		t.Helper()
		var r sessionapi.ExecResult
		api.do("POST", p+"/exec", req, 200, &r)
		calls++
		return r
	}
	if r := code("import json\nrows = []"); r.Error != nil || !r.Reset {
		t.Fatalf("first cell: %+v", r)
	}
	for i := range 10 {
		if r := code(fmt.Sprintf("rows.append(%d)\nlen(rows)", i)); r.Text != fmt.Sprint(i+1) || r.Reset {
			t.Fatalf("cell %d: %+v", i, r)
		}
	}
	if r := code("open('rows.json', 'w').write(json.dumps(rows))\nundefined_name"); r.Error == nil || r.Error.Name != "NameError" {
		t.Fatalf("a raising cell: %+v", r)
	}
	if r := code("sum(rows)"); r.Text != "45" {
		t.Fatalf("after the error: %+v", r)
	}
	if r := exec1(map[string]any{"shell": "python3 -c 'import json; print(len(json.load(open(\"rows.json\"))))'"}); r.ExitCode == nil || *r.ExitCode != 0 || r.Stdout != "10\n" {
		t.Fatalf("a command reading the cell's file: %+v", r)
	}
	api.do("PUT", p+"/files/site/index.html", []byte("<h1>sandfleet</h1>"), 200, nil)
	calls++
	var bg sessionapi.ExecResult
	api.do("POST", p+"/exec", map[string]any{"cmd": []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "site"}, "background": true}, 200, &bg)
	calls++
	if bg.PID == 0 {
		t.Fatalf("background: %+v", bg)
	}
	fetch := `import urllib.request, time
for _ in range(200):
    try:
        print(urllib.request.urlopen("http://127.0.0.1:8000/index.html").read().decode()); break
    except OSError:
        time.sleep(0.05)`
	if r := exec1(map[string]any{"cmd": []string{"python3", "-c", fetch}}); r.Stdout != "<h1>sandfleet</h1>\n" {
		t.Fatalf("the server's page: %+v", r)
	}
	var ps struct{ Processes []sessionapi.Process }
	api.do("GET", p+"/processes", nil, 200, &ps)
	calls++
	if len(ps.Processes) != 1 || !ps.Processes[0].Running {
		t.Fatalf("processes: %+v", ps)
	}
	var files struct{ Entries []sessionapi.Entry }
	api.do("GET", p+"/files?dir=.", nil, 200, &files)
	calls++
	var names []string
	for _, e := range files.Entries {
		names = append(names, e.Name)
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "rows.json") || !strings.Contains(got, "site") {
		t.Errorf("files: %s", got)
	}
	if got := api.do("GET", p+"/files/rows.json", nil, 200, nil); string(got) != "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]" {
		t.Errorf("read rows.json: %q", got)
	}
	calls++
	api.do("GET", p+"/files/nope.txt", nil, 404, nil)
	api.do("POST", p+"/processes/"+fmt.Sprint(bg.PID)+"/signal", nil, 200, nil)
	var out sessionapi.ProcessOutput
	api.do("GET", p+"/processes/"+fmt.Sprint(bg.PID)+"?wait=10s", nil, 200, &out)
	calls += 3
	if out.Running || !strings.Contains(out.Output, "GET /index.html") {
		t.Errorf("the server's end: %+v", out)
	}
	for calls < 30 {
		code("rows.append(len(rows))")
	}
	if r := code("rows[:11]"); r.Text != "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]" {
		t.Fatalf("after %d calls: %+v", calls, r)
	}
	api.do("POST", p+"/exec", map[string]any{"cmd": []string{"true"}, "bogus": 1}, 400, nil)
	api.do("GET", "/v1/sessions/no-such-session", nil, 404, nil)
	api.do("DELETE", p, nil, 200, &info)
	if info.Status != sessions.StatusEnded || info.EndReason != sessions.EndDeleted {
		t.Errorf("deleted: %+v", info)
	}
	api.do("POST", p+"/exec", map[string]any{"cmd": []string{"true"}}, 410, nil)
	api.do("GET", p, nil, 200, &info)
	if info.EndReason != sessions.EndDeleted {
		t.Errorf("the record after the delete: %+v", info)
	}
}
