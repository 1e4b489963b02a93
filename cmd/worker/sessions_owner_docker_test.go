package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// tenantAPI is a gateway in this process with three tokens of one
// tenant: the owner of a session, a peer, and a read-only one.
type tenantAPI struct {
	t                   *testing.T
	base                string
	owner, peer, reader string
}

func startTenantAPI(t *testing.T, natsURL string, client *jobs.Client, js jetstream.JetStream, tenant string) *tenantAPI {
	t.Helper()
	a := &tenantAPI{t: t}
	var lines []string
	for _, tk := range []struct {
		name, role string
		secret     *string
	}{{"owner", "", &a.owner}, {"peer", "", &a.peer}, {"reader", gateway.RoleRead, &a.reader}} {
		secret, line, err := gateway.NewTokenWith(tk.name, gateway.TokenOptions{Tenant: tenant, Role: tk.role})
		if err != nil {
			t.Fatal(err)
		}
		*tk.secret = secret
		lines = append(lines, line)
	}
	tokens, err := gateway.ParseTokens(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	tnc, tjs := natstest.Connect(t, natsURL, jobs.TenantOptions(tenant)...)
	tc, err := jobs.NewTenantClient(tjs, tenant, jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := sessions.NewClient(t.Context(), js, "")
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(client, js.Conn(), gateway.Config{Tokens: tokens, Tenants: map[string]gateway.Conn{tenant: {Client: tc, NC: tnc}},
		Sessions: sess, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	a.base = srv.URL
	return a
}

// do sends a request as token and returns the status and body.
func (a *tenantAPI) do(token, method, path string, body any) (int, []byte) {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(a.t.Context(), method, a.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	return res.StatusCode, data
}

// sh runs a shell command in a session as token and returns its stdout.
func (a *tenantAPI) sh(token, id, cmd string) string {
	a.t.Helper()
	status, body := a.do(token, "POST", "/v1/sessions/"+id+"/exec", map[string]any{"shell": cmd})
	var r sessionapi.ExecResult
	if status != 200 || json.Unmarshal(body, &r) != nil {
		a.t.Fatalf("exec %q: %d %s", cmd, status, body)
	}
	return r.Stdout
}

// A persistent session's checkpoint is its owner's alone: another token
// of the same tenant, read-write or read-only, neither reads it (the
// workspaces API, the console's list), nor restores it into a session of
// its own (workspace, workspace_from) or a job, nor plants files the
// owner's resume brings back, nor holds a job's step on it that stops the
// owner's checkpoints. The name a session's checkpoint has is refused
// to every caller.
func TestSessionCheckpointIsItsOwnersDocker(t *testing.T) {
	t.Parallel()
	workertest.Sandbox(t, executor.Config{WorkerID: "probe"}) // Docker and the image answer, or skip
	natsURL, client, js := natsServer(t)
	wid := uniqueID("owner")
	sessionWorker(t, natsURL, wid)
	api := startTenantAPI(t, natsURL, client, js, "acme")

	var s sessions.Info
	if status, body := api.do(api.owner, "POST", "/v1/sessions", map[string]any{"persist": true}); status != 201 || json.Unmarshal(body, &s) != nil {
		t.Fatalf("create: %d %s", status, body)
	}
	api.sh(api.owner, s.ID, "echo owner-secret > secret.txt")
	testutil.Eventually(t, 60*time.Second, "the owner's checkpoint", func() bool {
		var info sessions.Info
		_, body := api.do(api.owner, "GET", "/v1/sessions/"+s.ID, nil)
		return json.Unmarshal(body, &info) == nil && info.Checkpoint != nil
	})
	legacy := "s-" + strings.TrimPrefix(s.ID, "s-") // the name checkpoints had: the session's ID
	names := []string{legacy, strings.TrimPrefix(s.Workspace, "acme."), s.Workspace}

	// Reads: the workspaces API and the console's list.
	for _, tok := range []string{api.peer, api.reader} {
		for _, n := range names {
			for _, p := range []string{"/v1/workspaces/" + url.PathEscape(n), "/v1/workspaces/" + url.PathEscape(n) + "/snapshot"} {
				if status, body := api.do(tok, "GET", p, nil); status != 404 {
					t.Errorf("another token's GET %s: %d %.200q, want 404", p, status, body)
				}
			}
		}
		if status, body := api.do(tok, "GET", "/workspaces", nil); status != 200 || bytes.Contains(body, []byte(strings.TrimPrefix(s.ID, "s-"))) {
			t.Errorf("another token's console list: %d, names the session's checkpoint: %v", status, bytes.Contains(body, []byte(s.ID)))
		}
	}

	// Its name is refused to every caller, the owner's too.
	reserved := strings.TrimPrefix(s.Workspace, "acme.")
	for _, body := range []map[string]any{{"workspace": reserved}, {"workspace_from": map[string]any{"name": reserved}}} {
		if status, b := api.do(api.peer, "POST", "/v1/sessions", body); status != 400 {
			t.Errorf("a session naming the checkpoint %v: %d %s, want 400", body, status, b)
		}
	}
	for _, job := range []map[string]any{{"workspace": reserved}, {"workspace_from": reserved}} {
		job["image"], job["code"] = "python", "print(1)"
		if status, b := api.do(api.owner, "POST", "/v1/jobs", job); status != 400 {
			t.Errorf("a job naming the checkpoint %v: %d %s, want 400", job, status, b)
		}
	}

	// The old name holds none of the owner's files: a session or a job
	// of the peer's starting from it does not see them.
	if status, body := api.do(api.peer, "POST", "/v1/sessions", map[string]any{"workspace_from": map[string]any{"name": legacy}}); status == 201 {
		var f sessions.Info
		_ = json.Unmarshal(body, &f)
		if out := api.sh(api.peer, f.ID, "cat secret.txt 2>&1 || true"); strings.Contains(out, "owner-secret") {
			t.Errorf("a session of another token restored the checkpoint with workspace_from: %q", out)
		}
		api.do(api.peer, "DELETE", "/v1/sessions/"+f.ID, nil)
	}
	var res jobs.Result
	status, body := api.do(api.peer, "POST", "/v1/jobs?wait=120s", map[string]any{"image": "python", "workspace": legacy,
		"code": "import os\nprint(open('secret.txt').read() if os.path.exists('secret.txt') else 'none')"})
	if status != 200 || json.Unmarshal(body, &res) != nil || res.Stdout != "none\n" {
		t.Errorf("a job of another token in the session's workspace: %d %s, want it empty", status, body)
	}

	// A step held open on that name does not stop the owner's checkpoints.
	var held jobs.Result
	status, body = api.do(api.peer, "POST", "/v1/jobs", map[string]any{"image": "python", "workspace": legacy,
		"code": "import time\ntime.sleep(20)"})
	if status != 202 || json.Unmarshal(body, &held) != nil {
		t.Fatalf("the holding job: %d %s", status, body)
	}
	testutil.Eventually(t, 60*time.Second, "the holding job's step in flight", func() bool {
		h, err := client.Workspace(t.Context(), "acme."+legacy)
		return err == nil && h.Step != nil
	})
	api.sh(api.owner, s.ID, "echo two > more.txt")
	if status, body := api.do(api.owner, "POST", "/v1/sessions/"+s.ID+"/pause", nil); status != 200 {
		t.Errorf("the owner's pause while another token's step holds the old name: %d %s, want 200", status, body)
	}

	// A session of the peer's on the old name writes a file and checkpoints
	// it there when deleted: the owner's resume does not bring it back.
	var p sessions.Info
	if status, body := api.do(api.peer, "POST", "/v1/sessions", map[string]any{"workspace": legacy}); status != 201 || json.Unmarshal(body, &p) != nil {
		t.Fatalf("the peer's session on the old name: %d %s", status, body)
	}
	if out := api.sh(api.peer, p.ID, "cat secret.txt 2>&1 || true; echo planted > planted.txt"); strings.Contains(out, "owner-secret") {
		t.Errorf("a session of another token named the checkpoint and restored it: %q", out)
	}
	if status, body := api.do(api.peer, "DELETE", "/v1/sessions/"+p.ID, nil); status != 200 {
		t.Errorf("delete the peer's session: %d %s", status, body)
	}
	if status, body := api.do(api.owner, "POST", "/v1/sessions/"+s.ID+"/resume", nil); status != 200 {
		t.Fatalf("the owner's resume: %d %s", status, body)
	}
	if out := api.sh(api.owner, s.ID, "cat secret.txt more.txt; ls"); out != "owner-secret\ntwo\nmore.txt\nsecret.txt\n" {
		t.Errorf("the owner's files after the resume: %q, want its own alone", out)
	}
	if status, body := api.do(api.owner, "DELETE", "/v1/sessions/"+s.ID, nil); status != 200 {
		t.Errorf("delete: %d %s", status, body)
	}
	testutil.Eventually(t, 60*time.Second, "the holding job done", func() bool {
		var r jobs.Result
		_, body := api.do(api.peer, "GET", "/v1/jobs/"+url.PathEscape(held.ID), nil)
		return json.Unmarshal(body, &r) == nil && r.Status.Final()
	})
	testutil.Eventually(t, 60*time.Second, "the sandboxes removed", func() bool {
		return len(containers(t, executor.LabelWorker+"="+wid)) == 0
	})
}
