package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sandfleet/sandfleet/internal/natscreds"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
)

// --credentials FILE connects with the USER:PASSWORD in FILE, the file
// worker --embedded writes; a server that wants credentials and gets none
// says what to pass; a bad file, or a user in the URL as well, is a usage
// error that shows nothing of the file.
func TestCredentialsFlag(t *testing.T) {
	t.Parallel()
	s := natstest.ServerWith(t, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		Username: "sandfleet", Password: "hunter2secret"})
	url := s.ClientURL()
	dir := t.TempDir()
	good := filepath.Join(dir, natscreds.File)
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(good, []byte("sandfleet:hunter2secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("hunter2secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := submit(t, url, "", "get", "nope", "--credentials", good); got.code != exitNotFound {
		t.Errorf("with --credentials: %+v, want exit %d (connected, no such job)", got, exitNotFound)
	}
	// The session commands connect the same way (no worker here: a create
	// would wait for one, so a get of an unknown session shows the
	// connection held).
	if got := submit(t, url, "", "session", "get", "s-nope", "--credentials", good); got.code != exitNotFound {
		t.Errorf("session get with --credentials: %+v, want exit %d (connected, no such session)", got, exitNotFound)
	}
	got := submit(t, url, "", "get", "nope")
	if got.code != exitUnavailable || !strings.Contains(got.stderr, "--credentials FILE") {
		t.Errorf("without credentials: %+v, want exit %d saying what to pass", got, exitUnavailable)
	}
	withUser := "nats://u:p@" + strings.TrimPrefix(url, "nats://")
	for _, tc := range []struct{ name, url, file string }{
		{"bad file", url, bad},
		{"no file", url, filepath.Join(dir, "none")},
		{"a user in the URL too", withUser, good},
	} {
		got := submit(t, tc.url, "", "get", "nope", "--credentials", tc.file)
		if got.code != exitUsage || !strings.Contains(got.stderr, "--credentials") || strings.Contains(got.stderr, "hunter2") {
			t.Errorf("%s: %+v, want a usage error about --credentials", tc.name, got)
		}
	}
}
