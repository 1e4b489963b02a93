package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/sandfleet/sandfleet/internal/jobindex"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// ScreenshotsEnv names the variable that makes the browser tests save
// their screenshots in that directory (relative to the repository's
// root): SANDFLEET_SCREENSHOTS=docs/ writes the docs' pictures.
const ScreenshotsEnv = "SANDFLEET_SCREENSHOTS"

// browser is one headless Chromium for a test, its tab logged in.
type browser struct {
	ctx     context.Context
	base    string
	mu      sync.Mutex
	dialogs []string // JavaScript dialogs opened (alert, confirm): none may be
}

func startBrowser(t *testing.T, f *fleet, width, height int) *browser {
	t.Helper()
	path := testutil.NeedBrowser(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(width, height), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	b := &browser{ctx: ctx, base: f.url}
	// The first Run starts the browser and lives as long as ctx: no
	// deadline on it.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	dismiss := make(chan struct{}, 16)
	if err := chromedp.Listen(ctx, func(ev any) {
		if d, ok := ev.(*cdppage.EventJavascriptDialogOpening); ok {
			b.mu.Lock()
			b.dialogs = append(b.dialogs, d.Message)
			b.mu.Unlock()
			select {
			case dismiss <- struct{}{}:
			default:
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-dismiss:
				_ = chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
					_, err := cdp.Call(ctx, tg, cdppage.HandleJavaScriptDialog, cdppage.HandleJavaScriptDialogParams{Accept: false})
					return err
				}))
			}
		}
	}()
	// The dialog detector works: a probe's alert is seen (and dismissed).
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}
	_, _ = chromedp.Run(ctx, chromedp.Evaluate[any]("setTimeout(() => alert('probe'), 0); 1"))
	testutil.Eventually(t, 10*time.Second, "the probe's alert seen", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.dialogs) == 1 && b.dialogs[0] == "probe"
	})
	b.mu.Lock()
	b.dialogs = nil
	b.mu.Unlock()
	// Log in through the form, as a person would: the token goes into the
	// console's cookie.
	b.do(t, "log in",
		chromedp.Navigate(f.url+"/login?next=/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), f.alice),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.ID("workers")),
	)
	return b
}

// do runs actions with a deadline, failing t with what.
func (b *browser) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 45*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression of the test's own.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("browser: evaluate %s: %v", expr, err)
	}
	return v
}

// text is the text of the first element matching the CSS selector sel,
// "" when there is none.
func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	return eval[string](t, b, fmt.Sprintf("(document.querySelector(%q) || {}).textContent || ''", sel))
}

// waitText waits until sel's text contains want.
func (b *browser) waitText(t *testing.T, sel, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf("(document.querySelector(%q) || {}).textContent || ''", sel)))
		cancel()
		if err == nil {
			last = v
			if strings.Contains(v, want) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("browser: %s never showed %q (last: %q)", sel, want, last)
}

// screenshot saves the page as name.png when SANDFLEET_SCREENSHOTS asks.
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	dir := os.Getenv(ScreenshotsEnv)
	if dir == "" {
		return
	}
	if !filepath.IsAbs(dir) {
		root, err := testutil.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, dir)
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (b *browser) noDialogs(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.dialogs) > 0 {
		t.Fatalf("a script of a job ran: dialogs %q", b.dialogs)
	}
}

// submitHTTP queues a job through the HTTP API, as a client would.
func (f *fleet) submitHTTP(t *testing.T, job map[string]any) string {
	t.Helper()
	body, _ := json.Marshal(job)
	req, _ := http.NewRequestWithContext(t.Context(), "POST", f.url+"/v1/jobs", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+f.alice)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct{ ID string }
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("submit: %d %v", resp.StatusCode, err)
	}
	return p.ID
}

// TestBrowser drives the console in a real headless Chromium: the fleet
// page shows the worker; a job submitted through the API appears in the
// list; a running job's page shows its lines as they arrive and cancels
// it; a job printing <script> shows the text and runs nothing; a batch's
// report draws its plots; logging out sends the next page to the login
// form. With SANDFLEET_SCREENSHOTS=DIR it saves
// fleet.png, jobs.png, job-live.png, batch.png and fleet-phone.png there.
func TestBrowser(t *testing.T) {
	testutil.NeedBrowser(t)
	f := setup(t, options{slots: 4})
	b := startBrowser(t, f, 1280, 900)

	t.Run("fleet", func(t *testing.T) {
		b.do(t, "fleet page", chromedp.Navigate(f.url+"/"), chromedp.WaitVisible(chromedp.ID("workers")))
		if got := b.text(t, "#workers"); !strings.Contains(got, "w-console") || !strings.Contains(got, "ready") {
			t.Fatalf("workers: %q", got)
		}
	})

	t.Run("job list", func(t *testing.T) {
		id := f.submitHTTP(t, map[string]any{"image": "python", "code": "print listed", "labels": map[string]string{"suite": "smoke"}})
		f.indexed(t, id)
		b.do(t, "job list", chromedp.Navigate(f.url+"/jobs"), chromedp.WaitVisible(chromedp.ID("jobs")))
		b.waitText(t, "#jobs", id, 5*time.Second)
		b.screenshot(t, "jobs")
	})

	t.Run("live output and cancel", func(t *testing.T) {
		var code strings.Builder
		for i := 1; i <= 4; i++ {
			fmt.Fprintf(&code, "print step %d of the agent\nsleep 400ms\n", i)
		}
		code.WriteString("eprint waiting for the cancel\nblock\n")
		id := f.submitHTTP(t, map[string]any{"id": "live-demo", "image": "python", "code": code.String(),
			"labels": map[string]string{"suite": "live"}})
		b.do(t, "job page", chromedp.Navigate(f.url+"/jobs/"+id), chromedp.WaitVisible(chromedp.ID("live-output")))
		b.waitText(t, "#live-output", "step 1 of the agent", 10*time.Second)
		b.waitText(t, "#job-status", "running", 5*time.Second)
		b.waitText(t, "#live-output", "step 3 of the agent", 10*time.Second)
		b.waitText(t, "#live-output", "waiting for the cancel", 10*time.Second)
		b.screenshot(t, "job-live")
		b.do(t, "cancel", chromedp.Click(chromedp.CSS("#cancel button")))
		b.waitText(t, "#job-status", "canceled", 15*time.Second)
		res, err := f.client.Get(t.Context(), id)
		if err != nil || res.Status != jobs.StatusCanceled {
			t.Fatalf("the job after the page's cancel: %+v %v", res, err)
		}
	})

	t.Run("script is text", func(t *testing.T) {
		hostile := "<script>alert(1)</script>"
		// Live: the output arrives over the events while the job runs.
		release := filepath.Join(t.TempDir(), "release")
		id := f.submitHTTP(t, map[string]any{"id": "xss-live", "image": "python",
			"code": "print " + hostile + "\nprint <img src=x onerror=alert(2)>\nwaitfile " + release})
		b.do(t, "live page", chromedp.Navigate(f.url+"/jobs/"+id), chromedp.WaitVisible(chromedp.ID("live-output")))
		b.waitText(t, "#live-output", hostile, 10*time.Second)
		b.waitText(t, "#live-output", "<img src=x onerror=alert(2)>", 5*time.Second)
		elems := eval[int](t, b, `document.querySelectorAll('#live-output script, #live-output img').length`)
		if elems != 0 {
			t.Errorf("the live output made %d elements of the job's text", elems)
		}
		if err := os.WriteFile(release, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		// Finished: the page reloads with the stored result.
		b.waitText(t, "#job-status", "succeeded", 15*time.Second)
		b.waitText(t, "#stdout", hostile, 5*time.Second)
		if code := b.text(t, "#code"); !strings.Contains(code, hostile) {
			t.Errorf("code shown as %q", code)
		}
		elems = eval[int](t, b, `document.querySelectorAll('main script, main img').length`)
		if elems != 0 {
			t.Errorf("the page made %d elements of the job's text", elems)
		}
		b.noDialogs(t)
	})

	t.Run("display inline", func(t *testing.T) {
		// Two figures, then markup and an SVG a hostile job shows: the
		// figures come inline at their size, the others are counted, never
		// made into elements.
		id := f.submitHTTP(t, map[string]any{"id": "display-demo", "image": "python",
			"code": "print drew two\npng 64 48\npng 20 10\ndisplay text/html <script>alert(3)</script>\n" +
				"display image/svg+xml <svg xmlns='http://www.w3.org/2000/svg' onload='alert(4)'/>"})
		if _, err := f.client.Wait(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		b.do(t, "job page", chromedp.Navigate(f.url+"/jobs/"+id), chromedp.WaitVisible(chromedp.ID("display")))
		for deadline := time.Now().Add(10 * time.Second); !eval[bool](t, b, `[...document.querySelectorAll('#display img')].every(i => i.complete)`); {
			if time.Now().After(deadline) {
				t.Fatal("the figures did not load in 10s")
			}
			time.Sleep(20 * time.Millisecond)
		}
		type size struct{ W, H int }
		imgs := eval[[]size](t, b, `[...document.querySelectorAll('#display img')].map(i => ({W: i.naturalWidth, H: i.naturalHeight}))`)
		if want := []size{{64, 48}, {20, 10}}; fmt.Sprint(imgs) != fmt.Sprint(want) {
			t.Errorf("figures shown at %v, want %v (decoded by the browser)", imgs, want)
		}
		if got := b.text(t, "main"); !strings.Contains(got, "2 more not shown") {
			t.Errorf("the page does not count the two outputs it leaves out: %q", got)
		}
		if n := eval[int](t, b, `document.querySelectorAll('main script, main svg, main iframe').length`); n != 0 {
			t.Errorf("the page made %d elements of the job's markup", n)
		}
		b.screenshot(t, "job-display")
		b.noDialogs(t)
	})

	t.Run("batch report", func(t *testing.T) {
		var lines strings.Builder
		for i := range 24 {
			code := fmt.Sprintf("sleep %dms\\nprint %d", 20+(i*37)%300, i)
			if i%5 == 3 {
				code += "\\nexit 1"
			}
			fmt.Fprintf(&lines, `{"image":"python","code":"%s","labels":{"problem":"p%d","split":"%s"}}`+"\n", code, i, []string{"easy", "hard"}[i%2])
		}
		req, _ := http.NewRequestWithContext(t.Context(), "POST", f.url+"/v1/batches?name=nightly-eval", strings.NewReader(lines.String()))
		req.Header.Set("Authorization", "Bearer "+f.alice)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		_, _ = out.ReadFrom(resp.Body)
		resp.Body.Close()
		if !strings.Contains(out.String(), `"summary"`) {
			t.Fatalf("batch: %s", out.String())
		}
		idx, _ := jobindex.Open(t.Context(), f.js)
		testutil.Eventually(t, 10*time.Second, "the batch indexed", func() bool {
			n := 0
			_, _, err := idx.Scan(t.Context(), "nightly-eval", 100, func(s *records.Summary) bool {
				if s.State == records.Finished {
					n++
				}
				return true
			})
			return err == nil && n == 24
		})
		b.do(t, "batch page", chromedp.Navigate(f.url+"/batches/nightly-eval?group=split"), chromedp.WaitVisible(chromedp.CSS("figure.plot svg")))
		if got := b.text(t, "#groups"); !strings.Contains(got, "easy") || !strings.Contains(got, "hard") {
			t.Errorf("groups: %q", got)
		}
		bars := eval[int](t, b, `document.querySelectorAll('figure.plot rect.bar').length`)
		if bars != 50 {
			t.Errorf("%d bars, want 20 + 30", bars)
		}
		b.screenshot(t, "batch")
	})

	t.Run("busy fleet", func(t *testing.T) {
		if os.Getenv(ScreenshotsEnv) == "" {
			t.Skip("only a screenshot: set " + ScreenshotsEnv)
		}
		for i := range 6 {
			f.submitHTTP(t, map[string]any{"id": fmt.Sprintf("busy-%d", i), "image": "python", "code": "sleep 8s"})
		}
		b.do(t, "fleet page", chromedp.Navigate(f.url+"/"), chromedp.WaitVisible(chromedp.ID("workers")))
		b.waitText(t, "#workers", "4/4 busy", 10*time.Second) // the page refreshes itself
		b.screenshot(t, "fleet")
	})

	t.Run("phone", func(t *testing.T) {
		if os.Getenv(ScreenshotsEnv) == "" {
			t.Skip("only a screenshot: set " + ScreenshotsEnv)
		}
		b.do(t, "phone size", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)),
			chromedp.Navigate(f.url+"/jobs/live-demo"), chromedp.WaitVisible(chromedp.ID("job-status")))
		b.screenshot(t, "job-phone")
	})

	// Last: it ends the browser's session.
	t.Run("log out", func(t *testing.T) {
		b.do(t, "log out", chromedp.Navigate(f.url+"/jobs"), chromedp.WaitVisible(chromedp.ID("jobs")),
			chromedp.Click(chromedp.CSS("form.who button")), chromedp.WaitVisible(chromedp.ID("token")))
		b.do(t, "a page after logging out", chromedp.Navigate(f.url+"/jobs"), chromedp.WaitVisible(chromedp.ID("token")))
		if u := eval[string](t, b, "location.pathname"); u != "/login" {
			t.Errorf("after logging out /jobs is at %q, want the login form", u)
		}
	})
}
