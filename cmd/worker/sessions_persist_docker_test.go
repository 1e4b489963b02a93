package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// pythonOnly writes a worker config of the python preset alone, on the
// test's image (SANDFLEET_TEST_IMAGE, else the default).
func pythonOnly(t *testing.T) string {
	t.Helper()
	p := executor.DefaultPresets()["python"]
	if img := os.Getenv("SANDFLEET_TEST_IMAGE"); img != "" {
		p.Image = img
	}
	return writeConfig(t, map[string]executor.Preset{"python": p})
}

// sessionWorker starts a worker process that serves sessions on real
// Docker, and waits until it listens for creates.
func sessionWorker(t *testing.T, url, id string, extra ...string) *proc {
	t.Helper()
	w := dockerWorker(t, url, id, append([]string{"--config", pythonOnly(t), "--pool", "0", "--sessions", "3"}, extra...)...)
	testutil.Eventually(t, 60*time.Second, id+" serving sessions", func() bool {
		return strings.Contains(w.logs.String(), `"msg":"serving sessions"`)
	})
	return w
}

// A persistent session outlives its worker, on real Docker and real
// worker processes: the worker holding it is SIGKILLed, and the next
// calls (two at once) resume it on the other worker, once, with the files
// of its last checkpoint, its interpreter's memory gone and said so. A
// session that does not persist, on the same worker, is 410 lost. Then
// pause and resume keep the files, and a fork starts from them while its
// source goes on unchanged.
func TestSessionPersistDocker(t *testing.T) {
	t.Parallel()
	workertest.Sandbox(t, executor.Config{WorkerID: "probe"}) // Docker and the image answer, or skip
	url, _, js := natsServer(t)
	id1, id2 := uniqueID("persist-a"), uniqueID("persist-b")
	w1 := sessionWorker(t, url, id1)
	ctx := t.Context()
	c, err := sessions.NewClient(ctx, js, "") // the owner of a gateway without tokens
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Create(ctx, sessions.Spec{Persist: true, Files: map[string]string{"seed.txt": "seed\n"}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := c.Create(ctx, sessions.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Worker != id1 || !s.Persist || s.Workspace != fleet.SessionWorkspace("", s.ID) || plain.Persist {
		t.Fatalf("created: %+v and %+v", s, plain)
	}
	code := func(id, src string) *sessions.CodeResult {
		t.Helper()
		r, err := c.RunCode(ctx, id, "", sessionapi.CodeRequest{Code: src})
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		return r
	}
	sh := func(id, cmd string) string {
		t.Helper()
		r, err := c.Exec(ctx, id, "", sessionapi.ExecRequest{Shell: cmd})
		if err != nil || r.ExitCode == nil || *r.ExitCode != 0 {
			t.Fatalf("%q: %+v, %v", cmd, r, err)
		}
		return r.Stdout
	}
	code(s.ID, "x = 41\nopen('notes.txt', 'w').write('one\\n')")
	sh(s.ID, "echo two >> notes.txt && mkdir -p data && echo 1,2 > data/a.csv")
	last := time.Now()
	var cp *sessions.Info
	testutil.Eventually(t, 30*time.Second, "a checkpoint after the last call", func() bool {
		cp, err = c.Get(ctx, s.ID)
		return err == nil && cp.Checkpoint != nil && cp.Checkpoint.At.After(last)
	})
	addr := testutil.FreeAddr(t)
	w2 := sessionWorker(t, url, id2, "--http", addr)
	w1.kill()

	// Three calls at once, two here and a Python client's over HTTP: all
	// resume it, on one sandbox.
	var wg sync.WaitGroup
	var py []byte
	var pyErr error
	wg.Go(func() {
		cmd := exec.CommandContext(ctx, "python3", "-c", `import json, sys
from sandfleet import Sandbox
s = Sandbox(sys.argv[1]).session(sys.argv[2])
r = s.run_code("'x' in globals()")
s.refresh()
print(json.dumps({"reset": r.reset, "text": r.text, "restored": s.restored}))`, "http://"+addr, s.ID)
		cmd.Env = append(os.Environ(), "PYTHONPATH=../../clients/python")
		py, pyErr = cmd.CombinedOutput()
	})
	outs := make([]string, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			r, err := c.Exec(ctx, s.ID, "", sessionapi.ExecRequest{Shell: "cat seed.txt notes.txt data/a.csv"})
			if err == nil {
				outs[i] = r.Stdout
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil || outs[i] != "seed\none\ntwo\n1,2\n" {
			t.Fatalf("call %d after the loss: %q, %v", i, outs[i], errs[i])
		}
	}
	var pr struct {
		Reset    bool
		Text     string
		Restored *sessions.Restored
	}
	if err := json.Unmarshal(py, &pr); pyErr != nil || err != nil {
		t.Fatalf("the Python client: %s: %v, %v", py, pyErr, err)
	}
	if !pr.Reset || pr.Text != "False" || pr.Restored == nil || pr.Restored.Why != "lost" {
		t.Errorf("the Python client after the loss: %s", py)
	}
	if n := strings.Count(w2.logs.String(), `"msg":"resuming a session"`); n != 1 {
		t.Errorf("%d resumes on %s, want 1", n, id2)
	}
	info, err := c.Get(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != sessions.StatusRunning || info.Worker != id2 || info.Restored == nil ||
		info.Restored.Revision != cp.Checkpoint.Revision || info.Restored.Why != "lost" {
		t.Fatalf("the record after the resume: %+v (checkpoint %+v)", info, cp.Checkpoint)
	}
	if r, err := c.RunCode(ctx, s.ID, "", sessionapi.CodeRequest{Code: "'x' in globals()", Context: "other"}); err != nil || r.Text != "False" || !r.Reset {
		t.Errorf("another context after the resume: %+v, %v", r, err)
	}
	if _, err := c.Exec(ctx, plain.ID, "", sessionapi.ExecRequest{Shell: "true"}); !errors.Is(err, sessionapi.ErrGone) {
		t.Errorf("a session without persist after its worker's loss: %v, want gone", err)
	} else if p, _ := c.Get(ctx, plain.ID); p == nil || p.EndReason != sessions.EndLost {
		t.Errorf("its record: %+v", p)
	}

	// Pause, then resume: the files stay.
	sh(s.ID, "echo three >> notes.txt")
	paused, err := c.Pause(ctx, s.ID)
	if err != nil || paused.Status != sessions.StatusPaused {
		t.Fatalf("pause: %+v, %v", paused, err)
	}
	if _, err := c.Exec(ctx, s.ID, "", sessionapi.ExecRequest{Shell: "true"}); !errors.Is(err, sessionapi.ErrPaused) {
		t.Errorf("a call to a paused session: %v, want paused", err)
	}
	resumed, err := c.Resume(ctx, s.ID)
	if err != nil || resumed.Status != sessions.StatusRunning || resumed.Restored == nil || resumed.Restored.Why != "paused" ||
		resumed.Restored.Revision != paused.Checkpoint.Revision {
		t.Fatalf("resume: %+v, %v", resumed, err)
	}
	if got := sh(s.ID, "cat notes.txt"); got != "one\ntwo\nthree\n" {
		t.Errorf("notes after pause and resume: %q", got)
	}

	// A fork has the files; what each does after is its own.
	f, err := c.Fork(ctx, s.ID, sessions.ForkRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if f.ID == s.ID || f.ForkedFrom != s.ID || !f.Persist || f.Workspace != fleet.SessionWorkspace("", f.ID) {
		t.Fatalf("fork: %+v", f)
	}
	if got := sh(f.ID, "cat notes.txt; echo fork >> notes.txt"); got != "one\ntwo\nthree\n" {
		t.Errorf("the fork's notes: %q", got)
	}
	if got := sh(s.ID, "cat notes.txt"); got != "one\ntwo\nthree\n" {
		t.Errorf("the source's notes after the fork wrote: %q", got)
	}
	for _, id := range []string{s.ID, f.ID} {
		if _, err := c.Delete(ctx, id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	}
	testutil.Eventually(t, 30*time.Second, "the deleted sessions' sandboxes removed", func() bool {
		return len(containers(t, executor.LabelWorker+"="+id2)) == 0
	})
	// The sandboxes of the SIGKILLed worker end by themselves (their
	// stream closed); a restart under its ID would reap the containers.
	testutil.Eventually(t, 60*time.Second, "the lost worker's sandboxes ended", func() bool {
		out, _ := exec.CommandContext(context.Background(), "docker", "ps", "-q", "--filter", "label="+executor.LabelWorker+"="+id1).Output()
		return len(strings.TrimSpace(string(out))) == 0
	})
	if ids := containers(t, executor.LabelWorker+"="+id1); len(ids) > 0 {
		_ = exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).Run()
	}
}
