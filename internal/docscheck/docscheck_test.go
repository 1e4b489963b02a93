package docscheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Every relative link of README.md, the other pages at the root and
// docs/*.md leads to a file that exists and, with a #, to a heading of
// that page.
func TestLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	pages, err := filepath.Glob(filepath.Join(root, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, docs...)
	if !slices.Contains(pages, filepath.Join(root, "README.md")) || len(docs) == 0 {
		t.Fatalf("pages %q: want README.md and docs/*.md", pages)
	}
	n := 0
	for _, p := range pages {
		links, err := Links(p)
		if err != nil {
			t.Fatal(err)
		}
		n += len(links)
	}
	if n == 0 {
		t.Fatal("no links found: the check would pass on anything")
	}
	for _, err := range Check(pages) {
		t.Error(err)
	}
}

// The check itself: it finds what is broken, and nothing else.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/page.md", "# The page\n\n## Jobs and results: `submit run`\n\n## Jobs and results: `submit run`\n\nBack to [the front](../README.md#set-up).\n")
	write("docs/pic.png", "")
	write("README.md", strings.Join([]string{
		"# Front",
		"## Set-up",
		"[ok](docs/page.md) [ok](docs/page.md#jobs-and-results-submit-run) [ok](docs/page.md#jobs-and-results-submit-run-1)",
		"[ok](#set-up) ![ok](docs/pic.png) [ok](https://example.com/x#y) [ok](docs/)",
		`<img src="docs/pic.png"> ` + "`[not a link](nowhere.md)`",
		"[gone](docs/gone.md)",
		"[no heading](docs/page.md#nope)",
		"[no heading here](#nope)",
		"[abs](/etc/passwd)",
		"[ref]: docs/missing.md",
		`<img src="docs/missing.png">`,
		"```",
		"[in a code block](nowhere.md)",
		"```",
	}, "\n"))
	var got []string
	for _, err := range Check([]string{filepath.Join(dir, "README.md"), filepath.Join(dir, "docs", "page.md")}) {
		got = append(got, strings.TrimPrefix(err.Error(), dir+string(filepath.Separator)))
	}
	want := []string{
		"README.md:6: docs/gone.md: no such file",
		"README.md:7: docs/page.md#nope: ",
		"README.md:8: #nope: ",
		"README.md:9: /etc/passwd: an absolute path",
		"README.md:10: docs/missing.md: no such file",
		"README.md:11: docs/missing.png: no such file",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d: %q, want it to start %q", i, got[i], want[i])
		}
	}
}

func TestSlug(t *testing.T) {
	for title, want := range map[string]string{
		" Set-up: one command runs it, one tests it":         "set-up-one-command-runs-it-one-tests-it",
		" What a job cannot do, and the test that proves it": "what-a-job-cannot-do-and-the-test-that-proves-it",
		" `submit run` and `--json`":                         "submit-run-and---json",
		" Engine calls and their deadlines ##":               "engine-calls-and-their-deadlines",
		" A [link](x.md) in it":                              "a-link-in-it",
		" Performance II (i)-(n)":                            "performance-ii-i-n",
		" sandfleet_jobs_finished_total":                     "sandfleet_jobs_finished_total",
	} {
		if got := Slug(title); got != want {
			t.Errorf("Slug(%q) = %q, want %q", title, got, want)
		}
	}
}
