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
	"github.com/sandfleet/sandfleet/internal/worker"
)

// submit --tenant on a server started from the fleet's nats.conf with two
// tenants written by tenants.sh: a tenant runs, detaches, gets and waits
// for its own jobs under its qualified IDs, runs in its workspaces, lists,
// shows, gets and removes them, fetches its artifacts and replays and
// follows its jobs' output; the other tenant can do none of that to them;
// status, which reads the topology, is not a tenant's.
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
	// Workspaces, artifacts and live output, each tenant its own.
	dir := t.TempDir()
	asA := func(args ...string) out {
		return submit(t, urlA, "", append([]string{"--tenant", "team-a"}, args...)...)
	}
	asB := func(args ...string) out {
		return submit(t, urlB, "", append([]string{"--tenant", "team-b"}, args...)...)
	}
	want := func(what string, got out, code int, stdoutHas, stderrHas string) {
		t.Helper()
		if got.code != code || !strings.Contains(got.stdout, stdoutHas) || !strings.Contains(got.stderr, stderrHas) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d, %q, %q", what, got.code, got.stdout, got.stderr, code, stdoutHas, stderrHas)
		}
	}
	want("run in a workspace", asA("run", "--workspace", "agent", "--id", "w1", "-c", "write notes.txt secret of a\nwrite plot.png PNG\nprint saved",
		"--outputs", "*.png", "-O", filepath.Join(dir, "art")), 0, "", "1 artifacts of team-a.w1 written to")
	if b, err := os.ReadFile(filepath.Join(dir, "art", "plot.png")); err != nil || string(b) != "PNG\n" {
		t.Errorf("a's artifact: %q %v", b, err)
	}
	want("run live in the workspace", asA("run", "--workspace", "agent", "-c", "cat notes.txt"), 0, "secret of a\n", "")
	want("ls", asA("workspace", "ls"), 0, "team-a.agent", "")
	want("show", asA("workspace", "show", "agent"), 0, "revision   2", "")
	want("get", asA("workspace", "get", "agent@1", "-o", filepath.Join(dir, "ws")), 0, "wrote team-a.agent@1", "")
	if b, err := os.ReadFile(filepath.Join(dir, "ws", "notes.txt")); err != nil || string(b) != "secret of a\n" {
		t.Errorf("a's workspace get: %q %v", b, err)
	}
	want("artifacts", asA("artifacts", "team-a.w1", "-O", filepath.Join(dir, "again")), 0, "plot.png", "written to")
	want("logs", asA("logs", "team-a.w1"), 0, "saved\n", "")
	want("logs -f", asA("logs", "-f", "team-a.w1", "--json"), 0, `"type":"finished"`, "")
	want("logs of a job with no result", asA("logs", "team-a.none"), 75, "", "a tenant cannot read the queue")
	want("detach a slow one", asA("run", "--detach", "--id", "slow", "-c", "sleep 10s"), 0, "team-a.slow", "")
	want("get of a job queued or running", asA("get", "team-a.slow"), 75, "", "no result yet")
	want("get of a job with no result", asA("get", "team-a.none"), 75, "", "a tenant cannot read the queue")
	asA("cancel", "team-a.slow")

	want("b's ls", asB("workspace", "ls"), 0, "(no workspaces)", "")
	want("b's show of a's", asB("workspace", "show", "team-a.agent"), 2, "", "tenant team-a's")
	want("b's rm of a's", asB("workspace", "rm", "team-a.agent"), 2, "", "tenant team-a's")
	want("b's get of a's", asB("workspace", "get", "team-a.agent", "-o", filepath.Join(dir, "b")), 2, "", "tenant team-a's")
	want("b's job in a's workspace", asB("run", "--workspace", "team-a.agent", "-c", "cat notes.txt"), 2, "", "tenant team-a's")
	want("b's job from a's workspace", asB("run", "--workspace-from", "team-a.agent", "-c", "cat notes.txt"), 2, "", "tenant team-a's")
	want("b's logs of a's", asB("logs", "team-a.w1"), 1, "", "no job")
	want("b's own, of the same name", asB("run", "--workspace", "agent", "-c", "cat notes.txt\nprint empty"), 0, "empty\n", "")
	want("rm", asA("workspace", "rm", "agent"), 0, "removed workspace agent", "")
	want("show after rm", asA("workspace", "show", "agent"), 1, "", "no such workspace")

	if got := submit(t, urlA, "", "--tenant", "team-a", "status"); got.code == 0 {
		t.Errorf("status as a tenant: %+v", got)
	}
	if got := submit(t, urlA, "", "--tenant", "Team A", "get", "x"); got.code != 2 {
		t.Errorf("a bad --tenant: %+v, want exit 2", got)
	}
}
