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
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

const testPassword = "wS3cretPassw0rd"

// A --nats the worker cannot even parse is an error that hides the password.
func TestConnectErrorHidesPassword(t *testing.T) {
	t.Parallel()
	url := "nats://worker:" + testPassword + "@127.0.0.1:badport"
	o, err := parseFlags([]string{"--nats", url})
	if err != nil {
		t.Fatal(err)
	}
	var logs testutil.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	err = serve(context.Background(), context.Background(), o, log, &fakeexec.Executor{})
	if err == nil {
		t.Fatal("connected")
	}
	if strings.Contains(err.Error()+logs.String(), testPassword) || !strings.Contains(err.Error(), "worker:xxxxx@") {
		t.Errorf("error %q, logs %q", err, logs.String())
	}
}

// A worker started before its NATS server waits for it instead of exiting:
// it logs that NATS is not reachable (password masked), /readyz answers
// 503, and once the server is up it connects, sets up the topology, turns
// ready and runs jobs. No log line carries the password.
func TestWorkerWaitsForNATS(t *testing.T) {
	t.Parallel()
	addr := testutil.FreeAddr(t)
	url := "nats://worker:" + testPassword + "@" + addr
	metrics := testutil.FreeAddr(t)
	o, err := parseFlags([]string{"--nats", url, "--id", "patient", "--slots", "1", "--metrics", metrics})
	if err != nil {
		t.Fatal(err)
	}
	var logs testutil.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	stop, stopNow := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(stop, context.Background(), o, log, &fakeexec.Executor{}) }()
	defer func() {
		stopNow()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		if strings.Contains(logs.String(), testPassword) {
			t.Errorf("the logs show the password:\n%s", logs.String())
		}
	}()

	testutil.Eventually(t, 20*time.Second, "a failed connect logged", func() bool {
		return strings.Contains(logs.String(), "NATS not reachable")
	})
	if !strings.Contains(logs.String(), "worker:xxxxx@"+addr) {
		t.Errorf("logs do not name the server with the password masked:\n%s", logs.String())
	}
	testutil.Eventually(t, 10*time.Second, "/readyz 503 while NATS is down", func() bool {
		c, _ := httpGet("http://" + metrics + "/readyz")
		return c == 503
	})

	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	natstest.ServerWith(t, &server.Options{
		Host: host, Port: p, JetStream: true, StoreDir: t.TempDir(),
		Users: []*server.User{{Username: "worker", Password: testPassword}},
	})
	_, js := natstest.Connect(t, url)
	client, err := jobs.NewClient(t.Context(), js, jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := client.SubmitAndWait(ctx, &jobs.Job{ID: "late-nats", Image: "python", Code: "print ok"})
	if err != nil || res.Status != jobs.StatusSucceeded || res.Worker != "patient" {
		t.Fatalf("job: %v %+v", err, res)
	}
	testutil.Eventually(t, 10*time.Second, "/readyz 200", func() bool {
		c, _ := httpGet("http://" + metrics + "/readyz")
		return c == 200
	})
}
