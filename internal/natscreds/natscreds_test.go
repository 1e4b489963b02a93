package natscreds

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in         string
		user, pass string
	}{
		{"sandfleet:0123abcd\n", "sandfleet", "0123abcd"},
		{"u:p", "u", "p"},
		{"u:p:with:colons\n", "u", "p:with:colons"},
	} {
		u, p, err := Parse([]byte(tc.in))
		if err != nil || u != tc.user || p != tc.pass {
			t.Errorf("Parse(%q) = %q, %q, %v", tc.in, u, p, err)
		}
	}
	for _, in := range []string{"", "\n", "nopassword\n", ":p\n", "u:\n", "u:p\n\n", "u:p\nv:q\n", "u:p\r\n", "u:p\x00"} {
		if _, _, err := Parse([]byte(in)); !errors.Is(err, ErrBad) {
			t.Errorf("Parse(%q): %v, want ErrBad", in, err)
		}
	}
}

// A bad file's error names the file and shows nothing of what is in it.
func TestReadHidesContents(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), File)
	if err := os.WriteFile(path, []byte("hunter2secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := Read(path)
	if !errors.Is(err, ErrBad) || !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Read: %v", err)
	}
}
