package natsembed

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/natscreds"
)

// The first start makes the credentials, mode 0600; later starts (and
// starts at once) use the same ones.
func TestCredentialsMadeOnceMode0600(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const starts = 8
	type got struct{ path, user, password string }
	results := make([]got, starts)
	var wg sync.WaitGroup
	for i := range starts {
		wg.Go(func() {
			path, user, password, err := Credentials(dir)
			if err != nil {
				t.Error(err)
			}
			results[i] = got{path, user, password}
		})
	}
	wg.Wait()
	first := results[0]
	if first.path != filepath.Join(dir, natscreds.File) || first.user != User || len(first.password) != 64 {
		t.Fatalf("Credentials = %+v", first)
	}
	for _, r := range results {
		if r != first {
			t.Errorf("concurrent starts disagree: %+v and %+v", r, first)
		}
	}
	st, err := os.Stat(first.path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v, %v; want mode 0600", first.path, st.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("left in the data directory: %v", entries)
	}
	_, _, again, err := Credentials(dir)
	if err != nil || again != first.password {
		t.Errorf("second start: %v, another password: %v", err, again != first.password)
	}
}

// A file written beforehand is used; one that others may read is refused.
func TestCredentialsGiven(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, natscreds.File)
	if err := os.WriteFile(path, []byte("me:chosen\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, u, p, err := Credentials(dir); err != nil || u != "me" || p != "chosen" {
		t.Errorf("given file: %q %q %v", u, p, err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := Credentials(dir); !errors.Is(err, ErrCredentialsMode) {
		t.Errorf("mode 0640: %v, want ErrCredentialsMode", err)
	}
	if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := Credentials(dir); !errors.Is(err, natscreds.ErrBad) {
		t.Errorf("garbage: %v, want ErrBadCredentials", err)
	}
}

// With a password the server refuses a connection without it or with
// another one, and takes the right one; ClientURL carries it.
func TestStartWithCredentials(t *testing.T) {
	t.Parallel()
	o := Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), User: "u", Password: "right"}
	s, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	for name, opts := range map[string][]nats.Option{
		"none":  nil,
		"wrong": {nats.UserInfo("u", "wrong")},
		"user":  {nats.UserInfo("other", "right")},
	} {
		nc, err := nats.Connect(s.ClientURL(), opts...)
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("%s: %v, want nats.ErrAuthorization", name, err)
		}
		if nc != nil {
			nc.Close()
		}
	}
	nc, err := nats.Connect(ClientURL(s, o))
	if err != nil {
		t.Fatalf("with its credentials: %v", err)
	}
	nc.Close()
}

func TestLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:4222": true, "127.1.2.3:4222": true, "[::1]:4222": true, "localhost:4222": true,
		"0.0.0.0:4222": false, ":4222": false, "[::]:4222": false, "10.0.0.1:4222": false, "example.com:4222": false, "nonsense": false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v", addr, got)
		}
	}
}
