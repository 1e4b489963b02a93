package docscheck

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// issueRef is a citation of a tracker's issue: the word "issue" or
// "issues", an optional "#", then a number. Readers of the code never
// see the tracker, so a comment says the reason instead.
var issueRef = regexp.MustCompile(`(?i)\bissues? #?[0-9]+`)

// No comment, doc or message cites an issue number: a reader of the code
// has no tracker to look it up in, so the reason is said in plain words.
func TestNoIssueNumbers(t *testing.T) {
	root := filepath.Join("..", "..")
	text := map[string]bool{".go": true, ".md": true, ".py": true, ".ts": true, ".sh": true, ".yaml": true, ".yml": true,
		".awk": true, ".toml": true, ".html": true, ".css": true, ".js": true, ".conf": true, "Makefile": true, "Dockerfile": true, "run": true}
	skip := map[string]bool{".git": true, "node_modules": true, "dist": true, "bin": true, "data": true}
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skip[d.Name()] && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !text[filepath.Ext(path)] && !text[d.Name()] {
			return nil
		}
		files++
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for n := 1; sc.Scan(); n++ {
			if m := issueRef.FindString(sc.Text()); m != "" && !strings.Contains(path, "plainwords_test.go") {
				t.Errorf("%s:%d: %q: say the reason instead of the issue number", path, n, m)
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("looked at %d files: the walk missed the repository", files)
	}
}
