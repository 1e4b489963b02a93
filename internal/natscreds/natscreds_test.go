package natscreds

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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
		{"  u:p\r\n\n", "u", "p"},
	} {
		u, p, err := Parse([]byte(tc.in))
		if err != nil || u != tc.user || p != tc.pass {
			t.Errorf("Parse(%q) = %q, %q, %v", tc.in, u, p, err)
		}
	}
	for _, in := range []string{"", "\n", "nopassword\n", ":p\n", "u:\n", "u:p\nv:q\n", "u:p\rv:q", "u:p\x00"} {
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

// Option connects with a USER:PASSWORD file, takes a NATS credentials
// file as one, and refuses anything else without showing it.
func TestOption(t *testing.T) {
	t.Parallel()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true, Username: "u", Password: "hunter2secret"})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	opt, err := Option(write("good", "u:hunter2secret\n"))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.ClientURL(), opt)
	if err != nil {
		t.Fatalf("with the file's credentials: %v", err)
	}
	nc.Close()
	if opt, err := Option(write("jwt", jwtHeader+"\nxxx\n------END NATS USER JWT------\n")); err != nil || opt == nil {
		t.Errorf("a NATS credentials file: %v", err)
	}
	if _, err := Option(write("bad", "hunter2secret\n")); !errors.Is(err, ErrBad) || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("a bad file: %v", err)
	}
	if _, err := Option(filepath.Join(dir, "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no file: %v", err)
	}
}
