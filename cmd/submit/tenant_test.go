package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/pkg/worker"
)

// submit --tenant on a server started from the fleet's nats.conf with two
// tenants written by tenants.sh: a tenant runs, detaches, gets and waits
// for its own jobs under its qualified IDs; the other tenant cannot get
// them; status, which reads the topology, is not a tenant's.
func TestTenantSubmit(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "nats.conf")
	data, err := os.ReadFile("../../deploy/compose/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bash", "../../deploy/compose/tenants.sh", "--conf", conf, "team-a", "team-b").CombinedOutput(); err != nil {
		t.Fatalf("tenants.sh: %v\n%s", err, out)
	}
	for k, v := range map[string]string{"NATS_SERVER_NAME": "submit-tenants", "NATS_ROUTE_PASSWORD": "rRoute0",
		"SANDFLEET_SUBMITTER_PASSWORD": "sSub0", "SANDFLEET_WORKER_PASSWORD": "wWork0",
		"SANDFLEET_TENANT_TEAM_A_PASSWORD": "tA0", "SANDFLEET_TENANT_TEAM_B_PASSWORD": "tB0"} {
		t.Setenv(k, v)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	opts.Host, opts.Port, opts.HTTPPort, opts.Cluster, opts.Routes, opts.StoreDir = "127.0.0.1", -1, 0, server.ClusterOpts{}, nil, t.TempDir()
	s := natstest.ServerWith(t, opts)
	_, js := natstest.Connect(t, s.ClientURL(), nats.UserInfo("worker", "wWork0"))
	w := workertest.Start(t, js, &fakeexec.Executor{}, worker.Config{ID: "tenants", Slots: 2})
	testutil.Eventually(t, 30*time.Second, "the worker's topology", w.Ready)
	host := strings.TrimPrefix(s.ClientURL(), "nats://")
	urlA, urlB := "nats://tenant-team-a:tA0@"+host, "nats://tenant-team-b:tB0@"+host

	if got := submit(t, urlA, "", "--tenant", "team-a", "run", "-c", "print hello", "--id", "one"); got.code != 0 || got.stdout != "hello\n" {
		t.Fatalf("run as team-a: %+v", got)
	}
	got := submit(t, urlA, "", "--tenant", "team-a", "run", "--detach", "-c", "print later")
	id := strings.TrimSpace(got.stdout)
	if got.code != 0 || !strings.HasPrefix(id, "team-a.") {
		t.Fatalf("detach as team-a: %+v, want a team-a.<id>", got)
	}
	if got := submit(t, urlA, "", "--tenant", "team-a", "wait", id); got.code != 0 || got.stdout != "later\n" {
		t.Errorf("wait as team-a: %+v", got)
	}
	if got := submit(t, urlA, "", "--tenant", "team-a", "get", "team-a.one"); got.code != 0 || got.stdout != "hello\n" {
		t.Errorf("get as team-a: %+v", got)
	}
	if got := submit(t, urlB, "", "--tenant", "team-b", "get", "team-a.one", "--json"); got.code == 0 || strings.Contains(got.stdout, "hello") {
		t.Errorf("get of team-a's job as team-b: %+v", got)
	}
	if got := submit(t, urlA, "", "--tenant", "team-a", "status"); got.code == 0 {
		t.Errorf("status as a tenant: %+v", got)
	}
	if got := submit(t, urlA, "", "--tenant", "Team A", "get", "x"); got.code != 2 {
		t.Errorf("a bad --tenant: %+v, want exit 2", got)
	}
}
