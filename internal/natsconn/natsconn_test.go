package natsconn

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
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
