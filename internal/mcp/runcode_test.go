package mcp

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// The languages run_code offers are the presets a default worker has.
func TestDefaultLanguagesArePresets(t *testing.T) {
	t.Parallel()
	want := slices.Sorted(maps.Keys(executor.DefaultPresets()))
	if got := slices.Sorted(slices.Values(DefaultLanguages)); !slices.Equal(got, want) {
		t.Errorf("DefaultLanguages %v, the default presets %v", got, want)
	}
}

func testServer(t testing.TB, maxOutput int) *Server {
	t.Helper()
	s, err := NewServer(Options{MaxOutput: maxOutput, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		func(*Caller) (Runner, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func resultText(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// A result's text is within the bound whatever the streams hold, is valid
// UTF-8, keeps both ends of a cut stream, and says what it left out.
func TestRenderBound(t *testing.T) {
	t.Parallel()
	const bound = 2048
	s := testServer(t, bound)
	exit := 1
	cases := []struct {
		name           string
		stdout, stderr string
		cut            bool
	}{
		{"small", "42\n", "", false},
		{"both empty", "", "", false},
		{"stdout flood", "START" + strings.Repeat("a", 100000) + "END", "warning\n", true},
		{"stderr flood", "ok\n", "Traceback" + strings.Repeat("e", 50000) + "ValueError: boom", true},
		{"both flood", strings.Repeat("o", 9000), strings.Repeat("e", 9000), true},
		{"multibyte", strings.Repeat("é漢🙂", 5000), strings.Repeat("ü", 3000), true},
		{"just over", strings.Repeat("x", bound), "", true},
	}
	for _, c := range cases {
		res := &jobs.Result{ID: "j1", Status: jobs.StatusFailed, Exit: &exit, Stdout: c.stdout, Stderr: c.stderr,
			Error: strings.Repeat("why ", 1000)}
		txt := resultText(s.render(context.Background(), nil, res))
		if len(txt) > bound || !utf8.ValidString(txt) {
			t.Errorf("%s: %d bytes (bound %d), valid UTF-8 %v", c.name, len(txt), bound, utf8.ValidString(txt))
		}
		if got := strings.Contains(txt, "bytes left out"); got != c.cut {
			t.Errorf("%s: says it cut %v, want %v: %.300q", c.name, got, c.cut, txt)
		}
		for _, end := range []string{"START", "END", "Traceback", "ValueError: boom"} {
			if (strings.Contains(c.stdout, end) || strings.Contains(c.stderr, end)) && !strings.Contains(txt, end) {
				t.Errorf("%s: lost %q", c.name, end)
			}
		}
	}
}

// A sandbox that cut a stream itself (the output cap) is said too.
func TestRenderSaysTheSandboxCut(t *testing.T) {
	t.Parallel()
	s := testServer(t, 4096)
	res := &jobs.Result{ID: "j1", Status: jobs.StatusOutputLimit, Stdout: "xxx", StdoutTruncated: true}
	out := s.render(context.Background(), nil, res)
	if txt := resultText(out); !out.IsError || !strings.Contains(txt, "the sandbox kept only the start") || !strings.Contains(txt, "more output than the sandbox keeps") {
		t.Errorf("isError %v: %q", out.IsError, txt)
	}
}

// Output a program chose, any bytes at all, renders within the bound.
func FuzzRender(f *testing.F) {
	f.Add([]byte("hello\n"), []byte("\xff\xfe"), 1024)
	f.Add([]byte(strings.Repeat("🙂", 1000)), []byte(""), 1500)
	bounds := []int{minMaxOutput, 1500, 4096, 10000}
	servers := make([]*Server, len(bounds))
	for i, b := range bounds {
		servers[i] = testServer(f, b)
	}
	f.Fuzz(func(t *testing.T, stdout, stderr []byte, pick int) {
		i := abs(pick) % len(bounds)
		s, bound := servers[i], bounds[i]
		res := &jobs.Result{ID: "j1", Status: jobs.StatusSucceeded}
		res.SetOutput(stdout, stderr)
		txt := resultText(s.render(context.Background(), nil, res))
		if len(txt) > bound || !utf8.ValidString(txt) {
			t.Fatalf("%d bytes (bound %d), valid %v", len(txt), bound, utf8.ValidString(txt))
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
