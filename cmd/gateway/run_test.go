package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
)

func TestToken(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := Run(t.Context(), []string{"token", "ci", "--queues", "evals"}, &out); err != nil {
		t.Fatal(err)
	}
	var secret, line string
	for l := range strings.SplitSeq(out.String(), "\n") {
		if v, ok := strings.CutPrefix(l, "token:"); ok {
			secret = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(l, "tokens file:"); ok {
			line = strings.TrimSpace(v)
		}
	}
	ts, err := gateway.ParseTokens(strings.NewReader(line))
	if err != nil {
		t.Fatal(err)
	}
	if tok := ts.Lookup(secret); tok == nil || tok.Name != "ci" || tok.Allows("default") {
		t.Errorf("%s: token %+v", out.String(), tok)
	}
	out.Reset()
	if err := Run(t.Context(), []string{"token", "team-a-ci", "--tenant", "team-a"}, &out); err != nil || !strings.Contains(out.String(), " tenant=team-a\n") {
		t.Errorf("token --tenant: %v\n%s", err, out.String())
	}
}

// tenantTokens writes a token file with one token of tenant team-a.
func tenantTokens(t *testing.T) string {
	t.Helper()
	_, line, err := gateway.NewTokenWith("a-ci", gateway.TokenOptions{Tenant: "team-a"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--listen", "0.0.0.0:8080"}, // no tokens
		{"--tokens", "/nonexistent"},
		{"token"},
		{"token", "bad/name"},
		{"--queues", "a"},
		{"serve"},
		{"--log-level", "loud"},
		{"--max-streams", "0"},
		{"--max-waiting", "-1"},
		{"--max-batches", "0"},
		{"--max-streams-per-token", "0"},
		{"--max-waiting-per-tenant", "-1"},
		{"--console-session-ttl", "0s"},
		{"--max-console-sessions", "0"},
		{"token", "ci", "--tenant", "Team_A"},
		{"--tenant", "team-a"},          // not with the token command
		{"--tenant-creds", "team-a"},    // no FILE
		{"--tenant-creds", "Team_A=/x"}, // no tenant
		{"--tenant-creds", "a=/x", "--tenant-creds", "a=/y"},
		{"--tenant-creds", "team-a=/x"},                          // no token of team-a's
		{"--tokens", tenantTokens(t), "--listen", "127.0.0.1:0"}, // a tenant's token without its credentials
		{"--mcp-max-output", "100"},
	} {
		if err := Run(t.Context(), args, &bytes.Buffer{}); !errors.Is(err, cmdline.ErrUsage) {
			t.Errorf("Run(%q) = %v, want a usage error", args, err)
		}
	}
	var out bytes.Buffer
	if err := Run(t.Context(), []string{"--help"}, &out); err != nil || !strings.Contains(out.String(), "--tokens FILE") ||
		!strings.Contains(out.String(), "--max-streams-per-token N") {
		t.Errorf("--help: %v\n%s", err, out.String())
	}
}

// --max-waiting reaches the gateway: with room for one long poll, a second
// one is refused while the first waits (no worker answers either).
func TestMaxWaitingFlag(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	addr := testutil.FreeAddr(t)
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"--nats", srv.ClientURL(), "--listen", addr, "--max-waiting", "1", "--grace", "100ms", "--log-level", "error"}, &bytes.Buffer{})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	post := func(id string, timeout time.Duration) (*http.Response, error) {
		body := fmt.Sprintf(`{"id":%q,"image":"python","code":"print(1)"}`, id)
		c := &http.Client{Timeout: timeout}
		return c.Post("http://"+addr+"/v1/jobs?wait=20s", "application/json", strings.NewReader(body))
	}
	// The first long poll is sent again until it holds the slot: one sent
	// before the gateway listens, or before it has the topology, ends at
	// once. Which request takes the one slot is decided here, not by the
	// race: the second is sent only once the gateway's gauge says the first
	// holds it.
	var inflight atomic.Bool
	var firsts sync.WaitGroup
	defer firsts.Wait()
	testutil.Eventually(t, 60*time.Second, "the first long poll holds the slot", func() bool {
		if inflight.CompareAndSwap(false, true) {
			firsts.Go(func() {
				defer inflight.Store(false)
				if res, err := post("waits-1", 0); err == nil {
					res.Body.Close()
				}
			})
		}
		return waitingSlots(t, addr) == 1
	})
	res, err := post("waits-2", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the second long poll: %s, want 429", res.Status)
	}
	stop()
}

// --max-streams-per-token reaches the gateway: a token holding its one
// event stream gets 429 for a second, while another token still gets one
// (no worker: the job stays queued, its streams open).
func TestMaxStreamsPerTokenFlag(t *testing.T) {
	t.Parallel()
	addr, secrets := startWithTokens(t, "--max-streams-per-token", "1")
	send := func(ctx context.Context, method, path, name, body string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+secrets[name])
		return http.DefaultClient.Do(req)
	}
	testutil.Eventually(t, 60*time.Second, "the job queued", func() bool {
		res, err := send(t.Context(), "POST", "/v1/jobs", "alice", `{"id":"parked","image":"python","code":"print(1)"}`)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusAccepted
	})
	sctx, cut := context.WithCancel(t.Context())
	defer cut()
	for i, name := range []string{"alice", "bob"} {
		res, err := send(sctx, "GET", "/v1/jobs/parked/events", name, "")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s's stream: %s", name, res.Status)
		}
		testutil.Eventually(t, 60*time.Second, name+"'s stream holds its slot", func() bool {
			return slotsBusy(t, addr, "streams") == float64(i+1)
		})
	}
	res, err := send(t.Context(), "GET", "/v1/jobs/parked/events", "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
		t.Errorf("alice's second stream: %s (Retry-After %q), want 429 with Retry-After", res.Status, res.Header.Get("Retry-After"))
	}
	cut()
}

// --console-session-ttl reaches the console: a login's cookie lasts it.
func TestConsoleSessionTTLFlag(t *testing.T) {
	t.Parallel()
	addr, secrets := startWithTokens(t, "--console-session-ttl", "90m")
	var res *http.Response
	testutil.Eventually(t, 60*time.Second, "a login answered", func() bool {
		var err error
		res, err = (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).
			PostForm("http://"+addr+"/login", url.Values{"token": {secrets["alice"]}})
		if err != nil {
			return false
		}
		res.Body.Close()
		return true
	})
	if ck := res.Header.Get("Set-Cookie"); res.StatusCode != http.StatusSeeOther || !strings.Contains(ck, "Max-Age=5400") {
		t.Errorf("login: %s, cookie %q; want Max-Age=5400", res.Status, ck)
	}
}

// startWithTokens runs the gateway with tokens alice and bob and the
// flags given, until the test ends; it returns its address and the
// tokens' secrets by name.
func startWithTokens(t *testing.T, flags ...string) (string, map[string]string) {
	t.Helper()
	srv := natstest.Server(t)
	addr := testutil.FreeAddr(t)
	var lines []string
	secrets := map[string]string{}
	for _, name := range []string{"alice", "bob"} {
		secret, line, err := gateway.NewToken(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		secrets[name] = secret
		lines = append(lines, line)
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		args := append([]string{"--nats", srv.ClientURL(), "--listen", addr, "--tokens", tokens, "--grace", "100ms", "--log-level", "error"}, flags...)
		done <- Run(ctx, args, &bytes.Buffer{})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return addr, secrets
}

// waitingSlots reads the gateway's sandfleet_gateway_slots_busy{kind="waiting"}
// from its /metrics (0 while it is not up yet).
func waitingSlots(t *testing.T, addr string) float64 {
	t.Helper()
	return slotsBusy(t, addr, "waiting")
}

// slotsBusy reads the gateway's sandfleet_gateway_slots_busy{kind=kind}.
func slotsBusy(t *testing.T, addr, kind string) float64 {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	res, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	for line := range strings.SplitSeq(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, `sandfleet_gateway_slots_busy{kind="`+kind+`"} `); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return 0
}

// --mcp-max-output reaches /mcp's tools: their definitions say the bound.
func TestMCPMaxOutputFlag(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	addr := testutil.FreeAddr(t)
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"--nats", srv.ClientURL(), "--listen", addr, "--mcp-max-output", "2048", "--grace", "100ms", "--log-level", "error"}, &bytes.Buffer{})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var body []byte
	err := testutil.Poll(t.Context(), 10*time.Second, 50*time.Millisecond, func(context.Context) error {
		res, err := http.Get("http://" + addr + "/v1/tools?format=anthropic")
		if err != nil {
			return err
		}
		defer res.Body.Close()
		body, err = io.ReadAll(res.Body)
		if err == nil && res.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", res.Status, body)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), "at most 2048 bytes") {
		t.Errorf("the tools do not say the bound: %s", body)
	}
}
