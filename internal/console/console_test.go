package console_test

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/console"
	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/jobindex"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrf is the CSRF token a page's forms carry.
func csrf(t testing.TB, p page) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no csrf field in the page:\n%.2000s", p.body)
	}
	return m[1]
}

// indexed waits until the index lists the job as finished.
func (f *fleet) indexed(t testing.TB, id string) {
	t.Helper()
	idx, err := jobindex.Open(t.Context(), f.js)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, id+" indexed as finished", func() bool {
		s, err := idx.Summary(t.Context(), id)
		return err == nil && s.State == records.Finished
	})
}

// Every page renders, escapes what jobs wrote, and names no secret.
func TestPages(t *testing.T) {
	t.Parallel()
	f := setup(t, options{})
	hostile := "<script>alert(1)</script>"
	f.run(t, &jobs.Job{ID: "hostile", Image: "python", Code: "print " + hostile + "\neprint <img src=x onerror=alert(2)>",
		Files: map[string]string{"<i>.py": "<b>bold</b>"}, Env: map[string]string{"API_KEY": "sk-secret-value"},
		Labels: map[string]string{jobs.BatchLabel: "nightly", "task": "<u>t1</u>"}})
	f.run(t, &jobs.Job{ID: "fails", Image: "python", Code: "exit 3", Labels: map[string]string{jobs.BatchLabel: "nightly", "task": "t2"}})
	f.run(t, &jobs.Job{ID: "ws-1", Image: "python", Code: "write notes.txt one", Workspace: "agent-7"})
	for _, id := range []string{"hostile", "fails", "ws-1"} {
		f.indexed(t, id)
	}
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/", []string{"w-console", "v-test", "2 idle of 2", `href="/jobs?queue=default"`, "Dead letters"}},
		{"/jobs", []string{`href="/jobs/hostile"`, `href="/jobs/fails"`, "failed", "batch nightly"}},
		{"/jobs?status=failed", []string{`href="/jobs/fails"`}},
		{"/jobs?label=task%3Dt2", []string{`href="/jobs/fails"`}},
		{"/jobs/hostile", []string{"&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;img src=x onerror=alert(2)&gt;",
			"&lt;b&gt;bold&lt;/b&gt;", "API_KEY", "(values not shown)", `href="/batches/nightly"`}},
		{"/batches", []string{`href="/batches/nightly"`, "1/2 (50.0%)"}},
		{"/batches/nightly?group=task", []string{"50.0%", "<svg", "Duration", "Throughput", "&lt;u&gt;t1&lt;/u&gt;"}},
		{"/workspaces", []string{`href="/workspaces/agent-7"`}},
		{"/workspaces/agent-7", []string{`href="/jobs/ws-1"`, "Revisions kept"}},
	} {
		p := f.get(t, tc.path, f.alice)
		if p.status != http.StatusOK {
			t.Errorf("%s: %d\n%.1500s", tc.path, p.status, p.body)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(p.body, w) {
				t.Errorf("%s: no %q in\n%.3000s", tc.path, w, p.body)
			}
		}
		for _, bad := range []string{hostile, "<img src=x", "<b>bold", "<u>t1", "sk-secret-value", f.alice, f.viewer} {
			if strings.Contains(p.body, bad) {
				t.Errorf("%s: the page holds %q unescaped (or a secret)", tc.path, bad)
			}
		}
		if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("%s: CSP %q", tc.path, csp)
		}
	}
	// The list is filtered: only the failed job.
	if p := f.get(t, "/jobs?status=failed", f.alice); strings.Contains(p.body, `href="/jobs/hostile"`) {
		t.Error("status=failed lists a job that succeeded")
	}
	// An exact ID goes to the job's page.
	if p := f.get(t, "/jobs?q=fails", f.alice); p.status != http.StatusSeeOther || p.header.Get("Location") != "/jobs/fails" {
		t.Errorf("search by ID: %d %s", p.status, p.header.Get("Location"))
	}
	for path, code := range map[string]int{"/jobs/nope": 404, "/jobs/bad%20id": 404, "/batches/nope": 404,
		"/workspaces/nope": 404, "/jobs?status=weird": 400, "/jobs?before=x": 400, "/static/style.css": 200, "/static/console.js": 200} {
		if p := f.get(t, path, f.alice); p.status != code {
			t.Errorf("%s: %d, want %d", path, p.status, code)
		}
	}
}

// Without a token, pages send the browser to the login form; the form
// sets an HttpOnly, SameSite=Strict cookie that the pages and the API's
// GET routes take, and the API's writes do not.
func TestLogin(t *testing.T) {
	t.Parallel()
	f := setup(t, options{})
	if p := f.get(t, "/jobs?status=failed", ""); p.status != http.StatusSeeOther || p.header.Get("Location") != "/login?next=%2Fjobs%3Fstatus%3Dfailed" {
		t.Fatalf("no token: %d %q", p.status, p.header.Get("Location"))
	}
	if p := f.get(t, "/", "wrong"); p.status != http.StatusSeeOther {
		t.Errorf("bad token: %d", p.status)
	}
	if p := f.get(t, "/login?next=/jobs", ""); p.status != 200 || !strings.Contains(p.body, `type="password"`) {
		t.Errorf("login page: %d", p.status)
	}
	if p := f.do(t, "POST", "/login", "", url.Values{"token": {"sft_wrong"}}); p.status != http.StatusUnauthorized || strings.Contains(p.body, "sft_wrong") {
		t.Errorf("wrong token: %d", p.status)
	}
	if p := f.do(t, "POST", "/login", "", url.Values{"token": {f.alice}}, "Origin", "http://evil.example"); p.status != http.StatusForbidden {
		t.Errorf("login posted from elsewhere: %d", p.status)
	}
	// Targets that would leave the console: a browser drops tabs and
	// newlines from a URL, so "/\t/evil.example" is "//evil.example".
	for _, next := range []string{"/\t/evil.example/x", "/\n/evil.example/x", "/\\evil.example", "https://evil.example/"} {
		p := f.do(t, "POST", "/login", "", url.Values{"token": {f.alice}, "next": {next}})
		if p.status != http.StatusSeeOther || p.header.Get("Location") != "/" {
			t.Errorf("login with next %q: %d, Location %q; want /", next, p.status, p.header.Get("Location"))
		}
	}
	p := f.do(t, "POST", "/login", "", url.Values{"token": {f.alice}, "next": {"//evil.example/x"}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/" {
		t.Fatalf("login: %d %q", p.status, p.header.Get("Location"))
	}
	cookie, value := "Cookie", loginCookie(t, p)
	if p := f.get(t, "/", "", cookie, value); p.status != 200 || !strings.Contains(p.body, "alice") {
		t.Errorf("page with the cookie: %d", p.status)
	}
	f.run(t, &jobs.Job{ID: "c1", Image: "python", Code: "print hi"})
	if p := f.get(t, "/v1/jobs/c1/events", "", cookie, value); p.status != 200 || !strings.Contains(p.body, "event: finished") {
		t.Errorf("events with the cookie: %d %.300s", p.status, p.body)
	}
	if p := f.do(t, "POST", "/v1/jobs", "", nil, cookie, value); p.status != http.StatusUnauthorized {
		t.Errorf("submit with only the cookie: %d", p.status)
	}
	if p := f.do(t, "POST", "/v1/jobs/c1/cancel", "", nil, cookie, value); p.status != http.StatusUnauthorized {
		t.Errorf("cancel with only the cookie: %d", p.status)
	}
}

// loginCookie checks the login cookie a login answer sets, and returns it
// as a Cookie header's value.
func loginCookie(t *testing.T, p page) string {
	t.Helper()
	ck := p.header.Get("Set-Cookie")
	if !strings.HasPrefix(ck, console.CookieName+"=") || !strings.Contains(ck, "HttpOnly") || !strings.Contains(ck, "SameSite=Strict") {
		t.Fatalf("cookie %q", ck)
	}
	value, _, _ := strings.Cut(ck, ";")
	return value
}

// The login cookie holds a session, not the token: its value is no token
// and opens nothing once the session ends. After POST /logout it opens
// neither the console's pages nor the API's GET routes, a token put in
// the cookie opens nothing, and the token itself still works (logging out
// ends a login, not a token).
func TestLogout(t *testing.T) {
	t.Parallel()
	f := setup(t, options{})
	f.run(t, &jobs.Job{ID: "l1", Image: "python", Code: "print hi"})
	p := f.do(t, "POST", "/login", "", url.Values{"token": {f.alice}, "next": {"/jobs"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("login: %d", p.status)
	}
	value := loginCookie(t, p)
	if strings.Contains(value, f.alice) || strings.Contains(f.alice, strings.TrimPrefix(value, console.CookieName+"=")) {
		t.Fatalf("the cookie %q holds the token", value)
	}
	page := f.get(t, "/jobs/l1", "", "Cookie", value)
	if page.status != 200 || !strings.Contains(page.body, "alice") {
		t.Fatalf("a page with the cookie: %d", page.status)
	}
	if r := f.get(t, "/v1/jobs/l1/events", "", "Cookie", value); r.status != 200 {
		t.Fatalf("events with the cookie: %d", r.status)
	}
	// Another login of the same token is a session of its own: logging
	// out of one leaves the other.
	other := loginCookie(t, f.do(t, "POST", "/login", "", url.Values{"token": {f.alice}}))
	if p := f.do(t, "POST", "/logout", "", url.Values{"csrf": {csrf(t, page)}}, "Cookie", value, "Origin", f.url); p.status != http.StatusSeeOther || p.header.Get("Location") != "/login" {
		t.Fatalf("logout: %d %q", p.status, p.header.Get("Location"))
	}
	if p := f.get(t, "/jobs/l1", "", "Cookie", value); p.status != http.StatusSeeOther || !strings.HasPrefix(p.header.Get("Location"), "/login") {
		t.Errorf("a page with the cookie after logout: %d %q, want the login form", p.status, p.header.Get("Location"))
	}
	if r := f.get(t, "/v1/jobs/l1/events", "", "Cookie", value); r.status != http.StatusUnauthorized {
		t.Errorf("events with the cookie after logout: %d, want 401", r.status)
	}
	if p := f.do(t, "POST", "/logout", "", url.Values{"csrf": {csrf(t, page)}}, "Cookie", value, "Origin", f.url); p.status != http.StatusSeeOther || !strings.HasPrefix(p.header.Get("Location"), "/login") {
		t.Errorf("a second logout: %d %q", p.status, p.header.Get("Location"))
	}
	if p := f.get(t, "/jobs/l1", "", "Cookie", other); p.status != 200 {
		t.Errorf("the other login after this one's logout: %d", p.status)
	}
	if p := f.get(t, "/", "", "Cookie", console.CookieName+"="+f.alice); p.status != http.StatusSeeOther {
		t.Errorf("the token itself as the cookie: %d, want the login form", p.status)
	}
	if r := f.get(t, "/v1/jobs/l1/events", "", "Cookie", console.CookieName+"="+f.alice); r.status != http.StatusUnauthorized {
		t.Errorf("the token itself as the cookie, on the API: %d, want 401", r.status)
	}
	if p := f.get(t, "/jobs/l1", f.alice); p.status != 200 {
		t.Errorf("the token after logout: %d", p.status)
	}
}

// A session ends at its TTL: its cookie then opens neither pages nor the
// API, and the cookie's Max-Age says as much.
func TestSessionExpires(t *testing.T) {
	t.Parallel()
	f := setup(t, options{cfg: gateway.Config{ConsoleSessionTTL: 3 * time.Second}})
	p := f.do(t, "POST", "/login", "", url.Values{"token": {f.alice}})
	if !strings.Contains(p.header.Get("Set-Cookie"), "Max-Age=3") {
		t.Errorf("cookie %q, want Max-Age=3", p.header.Get("Set-Cookie"))
	}
	value := loginCookie(t, p)
	if p := f.get(t, "/", "", "Cookie", value); p.status != 200 {
		t.Fatalf("a page within the session: %d", p.status)
	}
	testutil.Eventually(t, 20*time.Second, "the expired session refused", func() bool {
		p := f.get(t, "/", "", "Cookie", value)
		return p.status == http.StatusSeeOther && strings.HasPrefix(p.header.Get("Location"), "/login")
	})
	if r := f.get(t, "/v1/status", "", "Cookie", value); r.status != http.StatusUnauthorized {
		t.Errorf("the API with an expired session: %d, want 401", r.status)
	}
}

// Cancel needs an operator's token, the page's CSRF token and the same
// origin; a read-only token sees no button and is refused.
func TestCancel(t *testing.T) {
	t.Parallel()
	f := setup(t, options{})
	release := filepath.Join(t.TempDir(), "release")
	t.Cleanup(func() { _ = os.WriteFile(release, nil, 0o600) })
	if _, err := f.client.Submit(t.Context(), &jobs.Job{ID: "long", Image: "python", Code: "print started\nwaitfile " + release}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the job running", func() bool { return f.exec.Running() == 1 })
	op := f.get(t, "/jobs/long", f.alice)
	if !strings.Contains(op.body, `id="cancel"`) || !strings.Contains(op.body, `data-events="/v1/jobs/long/events"`) {
		t.Fatalf("operator's page of a running job:\n%.3000s", op.body)
	}
	ro := f.get(t, "/jobs/long", f.viewer)
	if strings.Contains(ro.body, `id="cancel"`) || !strings.Contains(ro.body, "(read-only)") {
		t.Error("a read-only token gets the cancel button")
	}
	path := "/jobs/long/cancel"
	for name, tc := range map[string]struct {
		token string
		form  url.Values
		hdr   []string
	}{
		"no csrf":         {f.alice, url.Values{}, nil},
		"another's csrf":  {f.alice, url.Values{"csrf": {csrf(t, ro)}}, nil},
		"another origin":  {f.alice, url.Values{"csrf": {csrf(t, op)}}, []string{"Origin", "http://evil.example"}},
		"cross-site":      {f.alice, url.Values{"csrf": {csrf(t, op)}}, []string{"Sec-Fetch-Site", "cross-site"}},
		"read-only token": {f.viewer, url.Values{"csrf": {csrf(t, ro)}}, nil},
	} {
		if p := f.do(t, "POST", path, tc.token, tc.form, tc.hdr...); p.status != http.StatusForbidden {
			t.Errorf("%s: %d", name, p.status)
		}
	}
	if res, err := f.client.Get(t.Context(), "long"); err == nil {
		t.Fatalf("refused cancels ended the job: %s", res.Status)
	}
	p := f.do(t, "POST", path, f.alice, url.Values{"csrf": {csrf(t, op)}}, "Origin", f.url)
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/jobs/long?note=canceled" {
		t.Fatalf("cancel: %d %q\n%.1000s", p.status, p.header.Get("Location"), p.body)
	}
	if p := f.get(t, "/jobs/long?note=canceled", f.alice); !strings.Contains(p.body, ">canceled<") || strings.Contains(p.body, `id="cancel"`) {
		t.Errorf("after the cancel:\n%.2000s", p.body)
	}
	// The API's writes refuse a read-only token too.
	if p := f.do(t, "POST", "/v1/jobs", f.viewer, nil); p.status != http.StatusForbidden {
		t.Errorf("read-only submit: %d", p.status)
	}
}

// An open console (no tokens) answers loopback names only: a page
// elsewhere that rebinds its name to 127.0.0.1 gets nothing.
func TestOpenConsoleLoopbackOnly(t *testing.T) {
	t.Parallel()
	f := setup(t, options{open: true})
	if p := f.get(t, "/", ""); p.status != 200 {
		t.Errorf("loopback: %d", p.status)
	}
	if p := f.get(t, "/", "", "Host", "localhost:8080"); p.status != 200 {
		t.Errorf("localhost: %d", p.status)
	}
	if p := f.get(t, "/", "", "Host", "rebind.example:8080"); p.status != http.StatusForbidden {
		t.Errorf("another name: %d", p.status)
	}
}

// A token of no tenant sees no tenant's: the console neither lists, opens
// nor cancels a tenant's job (made over NATS), whose output and files are
// the tenant's, and neither lists nor opens its workspace.
func TestTenantJobNotOpened(t *testing.T) {
	t.Parallel()
	f := setup(t, options{})
	f.run(t, &jobs.Job{ID: "acme.j1", Image: "python", Workspace: "acme.agent", Code: "print acme-private"})
	if p := f.get(t, "/jobs/acme.j1", f.alice); p.status != http.StatusNotFound || strings.Contains(p.body, "acme-private") {
		t.Errorf("a tenant's job page: %d\n%.1000s", p.status, p.body)
	}
	if p := f.get(t, "/workspaces/acme.agent", f.alice); p.status != http.StatusNotFound {
		t.Errorf("a tenant's workspace page: %d\n%.1000s", p.status, p.body)
	}
	if p := f.get(t, "/workspaces", f.alice); p.status != http.StatusOK || strings.Contains(p.body, "acme.agent") {
		t.Errorf("the workspace list shows a tenant's: %d\n%.2000s", p.status, p.body)
	}
	op := f.get(t, "/jobs", f.alice)
	if op.status != http.StatusOK || strings.Contains(op.body, "acme.j1") {
		t.Errorf("the job list shows a tenant's job to a token of none: %d\n%.2000s", op.status, op.body)
	}
	if p := f.get(t, "/batches", f.alice); p.status != http.StatusOK || strings.Contains(p.body, "acme") {
		t.Errorf("the batch list: %d\n%.2000s", p.status, p.body)
	}
	if p := f.do(t, "POST", "/jobs/acme.j1/cancel", f.alice, url.Values{"csrf": {csrf(t, op)}}, "Origin", f.url); p.status != http.StatusNotFound {
		t.Errorf("cancel of a tenant's job: %d", p.status)
	}
}
