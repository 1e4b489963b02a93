package natsconn

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
)

func TestServerURL(t *testing.T) {
	t.Setenv(EnvURL, "")
	if got := ServerURL(""); got != nats.DefaultURL {
		t.Errorf("no flag, no env: %q", got)
	}
	t.Setenv(EnvURL, "nats://env:4222")
	if got := ServerURL(""); got != "nats://env:4222" {
		t.Errorf("env: %q", got)
	}
	if got := ServerURL("nats://flag:4222"); got != "nats://flag:4222" {
		t.Errorf("flag over env: %q", got)
	}
}

// A failed connect says which servers, with the password masked, and is
// still nats.ErrNoServers to errors.Is.
func TestConnectErrorMasksCredentials(t *testing.T) {
	t.Parallel()
	const pw = "hunter2secret"
	_, err := Connect(Config{URL: "nats://u:" + pw + "@127.0.0.1:1", Name: "test"})
	if err == nil || strings.Contains(err.Error(), pw) || !strings.Contains(err.Error(), "u:xxxxx@127.0.0.1:1") ||
		!errors.Is(err, nats.ErrNoServers) {
		t.Errorf("error %v", err)
	}
}

// JetStream gives a connection with a working JetStream context, says
// where it connects without the password, and leaves nothing open when
// the servers cannot be reached.
func TestJetStream(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	logs := &testutil.Buffer{}
	nc, js, err := JetStream(Config{URL: srv.ClientURL(), Name: "test", Log: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := js.AccountInfo(t.Context()); err != nil {
		t.Errorf("AccountInfo: %v", err)
	}
	if !strings.Contains(logs.String(), "connecting to NATS") {
		t.Errorf("logs:\n%s", logs)
	}

	const pw = "hunter2secret"
	logs = &testutil.Buffer{}
	nc, js, err = JetStream(Config{URL: "nats://u:" + pw + "@127.0.0.1:1", Name: "test", Log: slog.New(slog.NewTextHandler(logs, nil))})
	if err == nil || nc != nil || js != nil || !errors.Is(err, nats.ErrNoServers) {
		t.Errorf("JetStream with no server = %v, %v, %v", nc, js, err)
	}
	if strings.Contains(logs.String(), pw) || !strings.Contains(logs.String(), "u:xxxxx@127.0.0.1:1") {
		t.Errorf("logs:\n%s", logs)
	}
}
