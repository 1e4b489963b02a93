package natsurl

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://worker:s3cret@n1:4222", "nats://worker:xxxxx@n1:4222"},
		{"nats://worker:s3cret@n1:4222, nats://worker:s3cret@n2:4222,nats://n3:4222",
			"nats://worker:xxxxx@n1:4222,nats://worker:xxxxx@n2:4222,nats://n3:4222"},
		{"nats://myToken@n1:4222", "nats://xxxxx@n1:4222"},
		{"worker:s3cret@n1:4222", "worker:xxxxx@n1:4222"},
		{"tls://u:p%40ss@n1:4222", "tls://u:xxxxx@n1:4222"},
		{"nats://u:s3cret@n1:badport", "nats://xxxxx@n1:badport"},
		{"", ""},
	}
	for _, tc := range tests {
		if got := Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestError(t *testing.T) {
	t.Parallel()
	servers := "nats://worker:s3cret@n1:4222,nats://u:p%40ss@n2:badport,nats://tok3n@n3:4222"
	//lint:ignore SA1007 the parse error, which quotes the URL, is what this test needs
	_, perr := url.Parse("nats://u:p%40ss@n2:badport")
	for _, err := range []error{
		fmt.Errorf("connect to %s: %w", servers, nats.ErrNoServers),
		fmt.Errorf("connect: %w", perr),
		errors.New("p@ss and tok3n and s3cret"),
	} {
		got := Error(err, servers)
		for _, secret := range []string{"s3cret", "p%40ss", "p@ss", "tok3n"} {
			if strings.Contains(got.Error(), secret) {
				t.Errorf("Error(%q) = %q: shows %q", err, got, secret)
			}
		}
		if !errors.Is(got, err) {
			t.Errorf("Error(%q) no longer wraps it", err)
		}
	}
	if !errors.Is(Error(fmt.Errorf("x: %w", nats.ErrNoServers), servers), nats.ErrNoServers) {
		t.Error("errors.Is lost")
	}
	if Error(nil, servers) != nil {
		t.Error("Error(nil) != nil")
	}
}

func TestWithoutUser(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"nats://submitter:s3cret@n1:4222, nats://n2:4222,tok@n3:4222": "nats://n1:4222,nats://n2:4222,n3:4222",
		"tls://u:p@ss@n1:4222": "tls://n1:4222",
		"n1:4222":              "n1:4222",
	} {
		if got := WithoutUser(in); got != want {
			t.Errorf("WithoutUser(%q) = %q, want %q", in, got, want)
		}
	}
}
