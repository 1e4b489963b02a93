package main

import (
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
)

const testSubmitterPassword = "sEcretSubmitter7"

// restrictedServer starts an in-process server whose user "submitter" may
// not write RESULTS, like a fleet's submitter (deploy/compose/nats.conf),
// creates the topology as an admin, and returns host:port.
func restrictedServer(t *testing.T) string {
	t.Helper()
	s := natstest.ServerWith(t, &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		Users: []*server.User{
			{Username: "admin", Password: "a"},
			{Username: "submitter", Password: testSubmitterPassword, Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$KV.RESULTS.>"}},
			}},
		},
	})
	_, js := natstest.Connect(t, s.ClientURL(), nats.UserInfo("admin", "a"))
	if _, err := (fleet.Topology{}).Ensure(t.Context(), js); err != nil {
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

// No credential of --nats appears in what submit prints: errors name the
// server with the password masked, and the resume command of an
// interrupted batch masks it too.
func TestCredentialsNotPrinted(t *testing.T) {
	t.Parallel()
	addr := restrictedServer(t)
	for _, url := range []string{
		"nats://submitter:" + testSubmitterPassword + "@127.0.0.1:1",                     // unreachable
		"nats://submitter:" + testSubmitterPassword + "@127.0.0.1:badport",               // unparseable
		"nats://127.0.0.1:1, nats://submitter:" + testSubmitterPassword + "@127.0.0.1:2", // a list
		"nats://" + testSubmitterPassword + "@" + addr,                                   // a token that is wrong
	} {
		got := submit(t, url, "", "get", "x")
		if strings.Contains(got.stdout+got.stderr, testSubmitterPassword) || !strings.Contains(got.stderr, "xxxxx") {
			t.Errorf("%s: exit %d, stderr %q", url, got.code, got.stderr)
		}
	}
	cmd := resumeCommand([]string{"batch", "f.jsonl", "--nats", "nats://u:" + testSubmitterPassword + "@h:4222",
		"--nats=nats://" + testSubmitterPassword + "@h:4222", "-o", "out.jsonl"})
	if strings.Contains(cmd, testSubmitterPassword) || !strings.Contains(cmd, "--nats nats://u:xxxxx@h:4222") ||
		!strings.Contains(cmd, "--nats=nats://xxxxx@h:4222") || !strings.Contains(cmd, "-o out.jsonl") {
		t.Errorf("resume command %q", cmd)
	}
	// Global flags before the command are kept, masked, in their place.
	cmd = resumeCommand([]string{"--nats", "nats://u:" + testSubmitterPassword + "@h:4222", "batch", "f.jsonl"})
	if cmd != "submit --nats nats://u:xxxxx@h:4222 batch f.jsonl" {
		t.Errorf("resume command %q", cmd)
	}
}
