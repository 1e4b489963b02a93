package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var root = filepath.Join("..", "..")

// binaries builds worker, gateway and submit once for the tests.
var binaries = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "docgen-test")
	if err != nil {
		return "", err
	}
	return dir, build(root, dir)
})

func TestMain(m *testing.M) {
	code := m.Run()
	if dir, _ := binaries(); dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// The committed docs/cli.md is what the binaries built from this tree
// print: a flag added, removed or reworded without make docs fails here.
func TestCLIPage(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	want, err := cliPage(bin)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/cli.md differs from the binaries' help: run make docs and commit it\n%s", firstDiff("docs/cli.md", string(got), string(want)))
	}
	// Every command and the flags that matter most are on the page, so a
	// page rendered from nothing cannot pass.
	for _, s := range []string{"## worker", "## gateway", "## submit run", "## submit session", "--max-memory SIZE", "--tenant-creds T=FILE", "--detach"} {
		if !bytes.Contains(want, []byte(s)) {
			t.Errorf("the page lacks %q", s)
		}
	}
}

// The committed docs/metrics.md lists what the worker and the gateway
// built from this tree register: a metric added, removed or reworded
// without make docs fails here.
func TestMetricsPage(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	want, err := metricsPage(bin)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/metrics.md differs from the binaries' metrics: run make docs and commit it\n%s", firstDiff("docs/metrics.md", string(got), string(want)))
	}
	// Each section holds what matters most, so a page rendered from
	// nothing, or with the sections mixed up, cannot pass.
	page := string(want)
	for _, s := range []struct{ section, metric string }{
		{"## Worker", "| `sandfleet_jobs_finished_total` | counter | `status`, `preset` |"},
		{"## Worker", "| `sandfleet_queue_pending` | gauge | `queue` |"},
		{"## Worker", "| `sandfleet_sessions_ended_total` |"},
		{"## Gateway", "| `sandfleet_gateway_requests_total` | counter | `route`, `code` |"},
		{"## Go runtime and process", "| `go_goroutines` | gauge |"},
		{"## Go runtime and process", "| `process_resident_memory_bytes` |"},
	} {
		_, rest, _ := strings.Cut(page, "\n"+s.section+"\n")
		rest, _, _ = strings.Cut(rest, "\n## ")
		if !strings.Contains(rest, s.metric) {
			t.Errorf("section %q lacks %q", s.section, s.metric)
		}
	}
}

func TestParseMetrics(t *testing.T) {
	ms, err := parseMetrics("a_total\tcounter\tx,y\tAs.\nb\tgauge\t-\tB | c.\n")
	if err != nil || len(ms) != 2 || ms[0] != (metric{"a_total", "counter", "x,y", "As."}) || ms[1].labels != "" {
		t.Errorf("parseMetrics: %+v, %v", ms, err)
	}
	for _, bad := range []string{"", "a\tcounter\n", "a\tcounter\t-\t\n"} {
		if _, err := parseMetrics(bad); err == nil {
			t.Errorf("parseMetrics(%q): no error", bad)
		}
	}
	if got := cell("a | b"); got != `a \| b` {
		t.Errorf("cell: %q", got)
	}
}

func TestSubmitCommands(t *testing.T) {
	usage := "usage: submit\n\nCommands:\n  run [-c CODE]   run a job\n  session create|ls\n                  long-lived sandboxes\n  help [COMMAND]  this text\n\nGlobal flags:\n  --nats URL\n"
	if got := strings.Join(submitCommands(usage), ","); got != "run,session" {
		t.Errorf("submitCommands: %q, want run,session", got)
	}
}

// firstDiff shows the first line where the committed page and the
// generated one differ.
func firstDiff(page, committed, generated string) string {
	a, b := strings.Split(committed, "\n"), strings.Split(generated, "\n")
	for i := 0; i < max(len(a), len(b)); i++ {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n  %s: %s\n  binaries: %s", i+1, page, x, y)
		}
	}
	return ""
}
