package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/internal/fakeexec"
)

const testPassword = "wS3cretPassw0rd"

// A failed connect neither logs nor returns the password of --nats.
func TestConnectErrorHidesPassword(t *testing.T) {
	t.Parallel()
	for _, url := range []string{
		"nats://worker:" + testPassword + "@127.0.0.1:1,nats://worker:" + testPassword + "@127.0.0.1:2",
		"nats://worker:" + testPassword + "@127.0.0.1:badport",
	} {
		o, err := parseFlags([]string{"--nats", url})
		if err != nil {
			t.Fatal(err)
		}
		var logs syncBuffer
		log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		err = serve(context.Background(), context.Background(), o, log, &fakeexec.Executor{})
		if err == nil {
			t.Fatalf("%s: connected", url)
		}
		if strings.Contains(err.Error()+logs.String(), testPassword) || !strings.Contains(err.Error(), "worker:xxxxx@") {
			t.Errorf("%s: error %q, logs %q", url, err, logs.String())
		}
	}
}
