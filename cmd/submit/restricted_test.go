package main

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

const testSubmitterPassword = "sEcretSubmitter7"

// restrictedServer starts an in-process server whose user "submitter" may
// not write RESULTS, like a fleet's submitter (deploy/compose/nats.conf),
// creates the topology as an admin, and returns host:port.
func restrictedServer(t *testing.T) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		Users: []*server.User{
			{Username: "admin", Password: "a"},
			{Username: "submitter", Password: testSubmitterPassword, Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$KV.RESULTS.>"}},
			}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("admin", "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := (jobs.Topology{}).Ensure(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(s.ClientURL(), "nats://")
}

// A submitter that may not write RESULTS cancels a queued job with no
// worker up: submit cancel says the request is recorded and exits 0.
func TestCancelPendingExitsZero(t *testing.T) {
	t.Parallel()
	url := "nats://submitter:" + testSubmitterPassword + "@" + restrictedServer(t)
	if got := submit(t, url, "", "run", "--detach", "--id", "q-1", "-c", "print never"); got.code != 0 {
		t.Fatalf("detach: %+v", got)
	}
	got := submit(t, url, "", "cancel", "q-1")
	if got.code != 0 || !strings.Contains(got.stdout, "will finish as canceled when a worker takes it") {
		t.Errorf("cancel: %+v", got)
	}
	got = submit(t, url, "", "cancel", "q-1", "--json")
	if got.code != 0 || got.stdout != "" || !strings.Contains(got.stderr, "will finish as canceled") {
		t.Errorf("cancel --json: %+v", got)
	}
}
