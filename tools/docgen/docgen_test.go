package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The committed docs/cli.md is what the binaries built from this tree
// print: a flag added, removed or reworded without make docs fails here.
func TestCLIPage(t *testing.T) {
	root := filepath.Join("..", "..")
	bin := t.TempDir()
	if err := build(root, bin); err != nil {
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
		t.Fatalf("docs/cli.md differs from the binaries' help: run make docs and commit it\n%s", firstDiff(string(got), string(want)))
	}
	// Every command and the flags that matter most are on the page, so a
	// page rendered from nothing cannot pass.
	for _, s := range []string{"## worker", "## gateway", "## submit run", "## submit session", "--max-memory SIZE", "--tenant-creds T=FILE", "--detach"} {
		if !bytes.Contains(want, []byte(s)) {
			t.Errorf("the page lacks %q", s)
		}
	}
}

func TestSubmitCommands(t *testing.T) {
	usage := "usage: submit\n\nCommands:\n  run [-c CODE]   run a job\n  session create|ls\n                  long-lived sandboxes\n  help [COMMAND]  this text\n\nGlobal flags:\n  --nats URL\n"
	if got := strings.Join(submitCommands(usage), ","); got != "run,session" {
		t.Errorf("submitCommands: %q, want run,session", got)
	}
}

// firstDiff shows the first line where committed and generated differ.
func firstDiff(committed, generated string) string {
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
			return fmt.Sprintf("line %d:\n  docs/cli.md: %s\n  binaries:    %s", i+1, x, y)
		}
	}
	return ""
}
