package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/internal/cmdline"
)

// submit --version prints what worker --version and gateway --version
// print: the version make build stamps with -ldflags, else the toolchain's.
func TestVersion(t *testing.T) {
	t.Parallel()
	var o, e bytes.Buffer
	if code := runCLI(t.Context(), []string{"--version"}, strings.NewReader(""), &o, &e); code != 0 || e.Len() != 0 {
		t.Fatalf("--version: exit %d, stderr %q", code, e.String())
	}
	if want := "submit " + cmdline.Version(version) + "\n"; o.String() != want {
		t.Errorf("--version printed %q, want %q", o.String(), want)
	}
	o.Reset()
	if code := runCLI(t.Context(), []string{"--help"}, strings.NewReader(""), &o, &e); code != 0 || !strings.Contains(o.String(), "submit --version") {
		t.Errorf("--help: exit %d, lacks submit --version:\n%s", code, o.String())
	}
}
