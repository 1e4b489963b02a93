package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/templates"
)

// A tenant's job naming its tenant's own template runs on it, through a
// real worker: its env and a sandbox its start command and ready check
// ran in. Another tenant's job of the same name runs on the operator's
// template of it, never on the first tenant's; a name only the first
// tenant has is no image for the other; and a tenant's registration that
// names the worker's own image (written to the bucket past the registry's
// checks), or an image without the sandbox's label that an operator's
// template lent it, is refused by the worker before any container starts.
func TestTenantTemplateDocker(t *testing.T) {
	t.Parallel()
	w := startAPIWorker(t, pythonSandbox(t, runID("ttmpl")), "tt1", "--slots", "2", "--pool", "0")
	_, js := natstest.Connect(t, w.url)
	testutil.Eventually(t, 30*time.Second, "the worker's results bucket", func() bool {
		_, err := js.KeyValue(t.Context(), fleet.ResultsBucket)
		return err == nil
	})
	reg, err := templates.Open(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	image := executor.DefaultImage
	if img := os.Getenv("SANDFLEET_TEST_IMAGE"); img != "" {
		image = img
	}
	tmpl := func(who string) templates.Template {
		return templates.Template{Name: "t1", Image: image, MainFile: "main.py", Argv: []string{"python3", "main.py"},
			Env:    map[string]string{"WHO": who},
			Start:  []string{"sh", "-c", "sleep 1; echo started-" + who + " > /tmp/started"},
			Ready:  []string{"test", "-e", "/tmp/started"},
			Limits: limits.Limits{Timeout: limits.Duration(20 * time.Second)}}
	}
	if _, err := reg.Put(t.Context(), tmpl("operator")); err != nil {
		t.Fatal(err)
	}
	mine := tmpl("team-a")
	stored, err := reg.PutTenant(t.Context(), "team-a", mine, templates.TenantPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	onlyA := tmpl("team-a")
	onlyA.Name = "only-a"
	if _, err := reg.PutTenant(t.Context(), "team-a", onlyA, templates.TenantPolicy{}); err != nil {
		t.Fatal(err)
	}
	// An operator's template of an image that is no sandbox's (a mistake)
	// lends it to tenants' templates at registration; the worker still
	// runs none of theirs on it.
	natsImage := tmpl("operator")
	natsImage.Name, natsImage.Image = "on-nats", "sandfleet/nats:latest"
	if _, err := reg.Put(t.Context(), natsImage); err != nil {
		t.Fatal(err)
	}
	natsImage.Name = "borrowed"
	if _, err := reg.PutTenant(t.Context(), "team-b", natsImage, templates.TenantPolicy{}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), templates.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	forged := templates.Template{Name: "escape", Tenant: "team-b", Image: "sandfleet/worker:latest", MainFile: "main.py", Argv: []string{"python3", "main.py"}}
	data, _ := json.Marshal(forged)
	if _, err := kv.Put(t.Context(), templates.Key("team-b", "escape"), data); err != nil {
		t.Fatal(err)
	}

	clients := map[string]*jobs.Client{}
	for _, tenant := range []string{"team-a", "team-b"} {
		_, tjs := natstest.Connect(t, w.url, jobs.TenantOptions(tenant)...)
		c, err := jobs.NewTenantClient(tjs, tenant, jobs.Config{})
		if err != nil {
			t.Fatal(err)
		}
		clients[tenant] = c
	}
	code := "import os\nprint(open('/tmp/started').read().strip(), os.environ['WHO'])"
	run := func(tenant, image string) *jobs.Result {
		t.Helper()
		res, err := clients[tenant].SubmitAndWait(t.Context(), &jobs.Job{Image: image, Code: code})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	var res *jobs.Result
	testutil.Eventually(t, 60*time.Second, "the worker runs team-a's template", func() bool {
		res = run("team-a", "t1")
		return res.Status != jobs.StatusRejected
	})
	if res.Status != jobs.StatusSucceeded || res.Stdout != "started-team-a team-a\n" {
		data, _ := json.Marshal(res)
		t.Fatalf("team-a's job on its t1: %s", data)
	}
	if res.Template == nil || res.Template.Tenant != "team-a" || res.Template.Version != stored.Version {
		t.Errorf("the result's template: %+v, want team-a's t1 version %d", res.Template, stored.Version)
	}
	if res = run("team-b", "t1"); res.Status != jobs.StatusSucceeded || res.Stdout != "started-operator operator\n" ||
		res.Template == nil || res.Template.Tenant != "" {
		data, _ := json.Marshal(res)
		t.Errorf("team-b's job naming t1 ran on another than the operator's: %s", data)
	}
	if res = run("team-b", "only-a"); res.Status != jobs.StatusRejected || !strings.Contains(res.Error, "unknown preset or template") ||
		strings.Contains(res.Error, "only-a,") || strings.Contains(res.Error, ", only-a") {
		t.Errorf("team-b's job naming team-a's only-a: %s %q", res.Status, res.Error)
	}
	if res = run("team-b", "escape"); res.Status != jobs.StatusRejected || !strings.Contains(res.Error, "a tenant's template may not") {
		t.Errorf("team-b's template of the worker's image: %s %q", res.Status, res.Error)
	}
	if _, err := exec.Command("docker", "image", "inspect", "sandfleet/nats:latest").Output(); err == nil {
		if res = run("team-b", "borrowed"); res.Status != jobs.StatusRejected || !strings.Contains(res.Error, executor.SandboxLabel) {
			t.Errorf("team-b's template of an image without the sandbox label: %s %q", res.Status, res.Error)
		}
	}
}
