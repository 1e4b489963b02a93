package gateway_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/internal/gateway"
)

// The curl lines of docs/http-api.md, with the real curl: what a shell user sees.
func TestCurl(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	b := setup(t, options{cfg: gateway.Config{MaxJobBytes: 64 << 10}})
	big := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(big, []byte(`{"image":"python","code":"`+strings.Repeat("x", 70<<10)+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	jsonl := filepath.Join(t.TempDir(), "jobs.jsonl")
	if err := os.WriteFile(jsonl, []byte("{\"image\":\"python\",\"code\":\"print 1\"}\noops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth := "Authorization: Bearer " + b.alice
	for _, c := range []struct {
		args   []string
		status string
		body   string // a substring of the answer
	}{
		{[]string{"-X", "POST", b.url + "/v1/jobs?wait=30s", "-H", auth, "-d", `{"image":"python","code":"print 42"}`}, "200", `"stdout":"42\n"`},
		{[]string{"-X", "POST", b.url + "/v1/jobs", "-H", auth, "-d", `{"id":"c1","image":"python","code":"sleep 5s"}`}, "202", `{"id":"c1","status":"queued"}`},
		{[]string{b.url + "/v1/jobs/c1?wait=0.1", "-H", auth}, "202", `"id":"c1"`},
		{[]string{"-X", "POST", b.url + "/v1/jobs/c1/cancel", "-H", auth}, "200", `"status":"canceled"`},
		{[]string{"-X", "POST", b.url + "/v1/jobs", "-d", `{"image":"python","code":"print 1"}`}, "401", `"code":"unauthorized"`},
		{[]string{"-X", "POST", b.url + "/v1/jobs", "-H", "Authorization: Bearer sft_wrong", "-d", `{}`}, "401", `"code":"unauthorized"`},
		{[]string{"-X", "POST", b.url + "/v1/jobs", "-H", auth, "-d", `{"image":`}, "400", `"code":"invalid_json"`},
		{[]string{"-X", "POST", b.url + "/v1/jobs", "-H", auth, "-d", `{"image":"python","bogus":1}`}, "400", `"code":"unknown_field"`},
		{[]string{"-X", "POST", b.url + "/v1/jobs", "-H", auth, "--data-binary", "@" + big}, "413", `"code":"body_too_large"`},
		{[]string{"-X", "POST", b.url + "/v1/jobs", "-H", "Authorization: Bearer " + b.bob, "-d", `{"queue":"parked","image":"python","code":"print 1"}`}, "403", `"code":"forbidden"`},
		{[]string{"-X", "POST", b.url + "/v1/batches?name=curl", "-H", auth, "--data-binary", "@" + jsonl}, "200", `"summary":{"batch":"curl","total":1,"done":1`},
		{[]string{b.url + "/v1/jobs/nope", "-H", auth}, "404", `"code":"not_found"`},
		{[]string{b.url + "/v1/status", "-H", auth}, "200", `"workers":[`},
	} {
		args := append([]string{"-s", "-S", "--max-time", "60", "-w", "\n%{http_code}"}, c.args...)
		out, err := exec.CommandContext(t.Context(), "curl", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("curl %q: %v\n%s", c.args, err, out)
		}
		i := strings.LastIndex(string(out), "\n") // -w puts the status on a line of its own
		body, status := string(out[:max(i, 0)]), string(out[i+1:])
		if status != c.status || !strings.Contains(body, c.body) {
			t.Errorf("curl %q:\n%s %s\nwant %s and %s", c.args, status, body, c.status, c.body)
		}
	}
}
