package main

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
)

// A worker whose NATS credentials are refused gives up (nats.go closes
// the connection after the same authentication error twice) and exits
// with the error at once, not after the wait for a ready worker that
// hands back the start-up memory.
func TestRefusedCredentialsExitPromptly(t *testing.T) {
	t.Parallel()
	addr := testutil.FreeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	natstest.ServerWith(t, &server.Options{
		Host: host, Port: p, JetStream: true, StoreDir: t.TempDir(),
		Users: []*server.User{{Username: "worker", Password: "right"}},
	})
	o, err := parseFlags([]string{"--nats", "nats://worker:wrong@" + addr, "--id", "badpw", "--slots", "1"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- serve(context.Background(), context.Background(), o, slog.New(slog.DiscardHandler), &fakeexec.Executor{})
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("serve returned nil for refused credentials")
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("serve took %s to return %v", d.Round(time.Second), err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("serve still running after 90s")
	}
}

// While the topology is not set up yet (here: a server without
// JetStream), the executor is not checked: its gauge and /status do not
// say it is up, nor the queues' figures that they were read.
func TestNothingUpBeforeSetUp(t *testing.T) {
	t.Parallel()
	srv := natstest.ServerWith(t, &server.Options{Host: "127.0.0.1", Port: -1})
	addr := testutil.FreeAddr(t)
	o, err := parseFlags([]string{"--nats", srv.ClientURL(), "--id", "early", "--slots", "1", "--metrics", addr})
	if err != nil {
		t.Fatal(err)
	}
	exec := &fakeexec.Executor{}
	exec.SetDown(true)
	stop, stopNow := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(stop, context.Background(), o, slog.New(slog.DiscardHandler), exec) }()
	defer func() { stopNow(); <-done }()
	testutil.Eventually(t, 10*time.Second, "/metrics served", func() bool {
		c, _ := httpGet("http://" + addr + "/metrics")
		return c == 200
	})
	m := scrape(t, addr)
	if m["sandfleet_executor_ready"] != 0 || m["sandfleet_queue_stats_up"] != 0 {
		t.Errorf("before set-up: sandfleet_executor_ready %v, sandfleet_queue_stats_up %v; want 0 and 0",
			m["sandfleet_executor_ready"], m["sandfleet_queue_stats_up"])
	}
	if _, status := httpGet("http://" + addr + "/status"); !strings.Contains(status, `"ready":false`) {
		t.Errorf("/status before set-up: %s", status)
	}
}
