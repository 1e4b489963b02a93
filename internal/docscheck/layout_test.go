package docscheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// layoutPath is a path in backticks in the first cell of a table row of
// docs/layout.md: | `cmd/worker`, `cmd/submit` | ... |
var layoutPath = regexp.MustCompile("`([^`]+)`")

// layoutPaths returns the paths the table of a layout page lists, each as
// given (a trailing slash dropped).
func layoutPaths(text string) []string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(strings.TrimSpace(line), "|") || len(cells) < 3 {
			continue
		}
		for _, m := range layoutPath.FindAllStringSubmatch(cells[1], -1) {
			out = append(out, strings.TrimSuffix(m[1], "/"))
		}
	}
	return out
}

// goDirs returns the directories under root, relative to it with
// slashes, that hold a .go file (tests included), skipping testdata and
// what tools install (node_modules) or build.
func goDirs(t *testing.T, root string) []string {
	t.Helper()
	skip := map[string]bool{".git": true, "node_modules": true, "dist": true, "bin": true, "testdata": true}
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (skip[d.Name()] || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			seen[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	delete(seen, ".") // a Go file at the root would be the module's own package: none today
	dirs := make([]string, 0, len(seen))
	for d := range seen {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	return dirs
}

// covered reports whether dir, or a directory above it, is listed: a
// package's own helpers (internal/testutil/fakeexec) are its row's.
func covered(dir string, listed map[string]bool) bool {
	for d := dir; d != "." && d != "/"; d = filepath.ToSlash(filepath.Dir(d)) {
		if listed[d] {
			return true
		}
	}
	return false
}

// docs/layout.md's table names every directory with Go code (or one
// above it), and every path the table names exists: a package added,
// moved or removed without its row fails here.
func TestLayoutListsEveryPackage(t *testing.T) {
	root := filepath.Join("..", "..")
	b, err := os.ReadFile(filepath.Join(root, "docs", "layout.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths := layoutPaths(string(b))
	if len(paths) < 10 {
		t.Fatalf("docs/layout.md: %d paths found in its table's first column; the check would pass on anything", len(paths))
	}
	listed := map[string]bool{}
	for _, p := range paths {
		listed[p] = true
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
			t.Errorf("docs/layout.md lists `%s`, which does not exist: fix or remove its row", p)
		}
	}
	for _, d := range goDirs(t, root) {
		if !covered(d, listed) {
			t.Errorf("%s holds Go files but docs/layout.md's table does not list it (nor a directory above it): add a row \"| `%s` | what it owns |\"", d, d)
		}
	}
}

// The table's parsing and the rule for a package under a listed one.
func TestLayoutPaths(t *testing.T) {
	text := "# Layout\n\n| path | owns |\n|---|---|\n" +
		"| `cmd/a`, `cmd/b` | the binaries; `not/a/path` in the second cell |\n" +
		"| `sandbox-image/` | the image |\n" +
		"Text with `x/y` outside the table.\n"
	got := layoutPaths(text)
	want := []string{"cmd/a", "cmd/b", "sandbox-image"}
	if !slices.Equal(got, want) {
		t.Fatalf("layoutPaths: %q, want %q", got, want)
	}
	listed := map[string]bool{"internal/testutil": true, "sandbox-image": true}
	for dir, want := range map[string]bool{
		"internal/testutil":          true,
		"internal/testutil/fakeexec": true,
		"sandbox-image/launcher":     true,
		"internal/test":              false,
		"internal/testutility":       false,
		"internal":                   false,
	} {
		if got := covered(dir, listed); got != want {
			t.Errorf("covered(%q) = %v, want %v", dir, got, want)
		}
	}
}
