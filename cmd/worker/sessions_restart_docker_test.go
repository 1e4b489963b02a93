package main

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/natsconn"
	"github.com/sandfleet/sandfleet/internal/natscreds"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// A persistent session survives the restart of its own worker: SIGKILLed
// and started again with the same --id (what systemd, a restart policy or
// a DaemonSet does), the worker leaves the checkpointed session to its
// next call, which resumes it from the checkpoint, on that worker or
// another; a session without persist is 410 lost. Once resumed, a call
// that changes no file saves no new revision. Run as make run starts the
// worker (--embedded, its JetStream store in --data-dir kept across the
// restart), and in a fleet whose restarted worker is back before the
// next call.
func TestSessionResumesOnItsRestartedWorkerDocker(t *testing.T) {
	t.Parallel()
	workertest.Sandbox(t, executor.Config{WorkerID: "probe"}) // Docker and the image answer, or skip
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		id, dir, listen := uniqueID("restart-emb"), t.TempDir(), testutil.FreeAddr(t)
		start := func() *proc { return embeddedSessionWorker(t, id, listen, dir) }
		restartScenario(t, start, func() jetstream.JetStream { return embeddedJS(t, listen, dir) }, nil)
	})
	t.Run("fleet", func(t *testing.T) {
		t.Parallel()
		url, _, js := natsServer(t)
		id := uniqueID("restart-a")
		start := func() *proc { return sessionWorker(t, url, id) }
		other := func() *proc { return sessionWorker(t, url, uniqueID("restart-b")) }
		restartScenario(t, start, func() jetstream.JetStream { return js }, other)
	})
}

// restartScenario runs the restart on the worker start starts (the same
// --id each time); other, if set, starts a second worker of the fleet
// once the sessions are made.
func restartScenario(t *testing.T, start func() *proc, connect func() jetstream.JetStream, other func() *proc) {
	ctx := t.Context()
	w := start()
	c, err := sessions.NewClient(ctx, connect(), "")
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
	if r, err := c.Exec(ctx, s.ID, "", sessionapi.ExecRequest{Shell: "echo one > notes.txt"}); err != nil || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("write: %+v, %v", r, err)
	}
	last := time.Now()
	var cp *sessions.Info
	testutil.Eventually(t, 60*time.Second, "a checkpoint after the last call", func() bool {
		cp, err = c.Get(ctx, s.ID)
		return err == nil && cp.Checkpoint != nil && cp.Checkpoint.At.After(last)
	})
	procs := []*proc{}
	if other != nil {
		procs = append(procs, other())
	}
	w.kill()
	w = start() // back before the next call
	procs = append(procs, w)
	for line := range strings.Lines(w.logs.String()) {
		if strings.Contains(line, "earlier run is lost") && strings.Contains(line, s.ID) {
			t.Errorf("the restarted worker lost the checkpointed session: %s", line)
		}
	}
	c, err = sessions.NewClient(ctx, connect(), "")
	if err != nil {
		t.Fatal(err)
	}

	r, err := c.Exec(ctx, s.ID, "", sessionapi.ExecRequest{Shell: "cat seed.txt notes.txt"})
	if err != nil || r.Stdout != "seed\none\n" {
		t.Fatalf("a call after the restart: %+v, %v, want the checkpoint's files", r, err)
	}
	info, err := c.Get(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != sessions.StatusRunning || info.Restored == nil || info.Restored.Why != "lost" || info.Restored.Revision != cp.Checkpoint.Revision {
		t.Fatalf("the record after the resume: %+v (checkpoint %+v)", info, cp.Checkpoint)
	}
	if _, err := c.Exec(ctx, plain.ID, "", sessionapi.ExecRequest{Shell: "true"}); !errors.Is(err, sessionapi.ErrGone) {
		t.Errorf("a session without persist after its worker's restart: %v, want gone", err)
	} else if p, _ := c.Get(ctx, plain.ID); p == nil || p.EndReason != sessions.EndLost {
		t.Errorf("its record: %+v", p)
	}

	// The call above may have changed files: its idle checkpoint finds
	// the restored tree as it was, and saves nothing.
	holder := procs[0]
	for _, p := range procs {
		if strings.Contains(p.logs.String(), `"msg":"resuming a session"`) {
			holder = p
		}
	}
	testutil.Eventually(t, 60*time.Second, "the idle checkpoint after the resume", func() bool {
		return strings.Contains(holder.logs.String(), `"msg":"session checkpoint unchanged"`)
	})
	if info, err := c.Get(ctx, s.ID); err != nil || info.Checkpoint == nil || info.Checkpoint.Revision != cp.Checkpoint.Revision {
		t.Errorf("the checkpoint after an unchanged tree: %+v, %v, want revision %d still", info, err, cp.Checkpoint.Revision)
	}
	if _, err := c.Delete(ctx, s.ID); err != nil {
		t.Errorf("delete: %v", err)
	}
	for _, p := range procs {
		p.signal(t, syscall.SIGTERM)
		p.exited(t, 60*time.Second)
	}
}

// embeddedSessionWorker starts the binary as make run does (--embedded),
// its store in dir and its server on listen, serving sessions on real
// Docker, and waits until it listens for creates.
func embeddedSessionWorker(t *testing.T, id, listen, dir string) *proc {
	t.Helper()
	t.Cleanup(func() {
		err := testutil.Poll(context.Background(), 30*time.Second, 250*time.Millisecond, func(context.Context) error {
			if ids := containers(t, executor.LabelWorker+"="+id); len(ids) > 0 {
				return errors.New("containers left")
			}
			return nil
		})
		if ids := containers(t, executor.LabelWorker+"="+id); err != nil && len(ids) > 0 {
			t.Errorf("containers of %s left: %v", id, ids)
			_ = exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).Run()
		}
	})
	w := startProc(t, id, []string{"--embedded", "--listen", listen, "--data-dir", dir, "--http", "", "--id", id, "--log-format", "json",
		"--slots", "1", "--config", pythonOnly(t), "--pool", "0", "--sessions", "3"})
	testutil.Eventually(t, 60*time.Second, id+" serving sessions", func() bool {
		return strings.Contains(w.logs.String(), `"msg":"serving sessions"`)
	})
	return w
}

// embeddedJS connects to the embedded server on listen with the
// credentials in its data directory dir.
func embeddedJS(t *testing.T, listen, dir string) jetstream.JetStream {
	t.Helper()
	var js jetstream.JetStream
	err := testutil.Poll(t.Context(), 20*time.Second, 100*time.Millisecond, func(context.Context) error {
		user, password, err := natscreds.Read(filepath.Join(dir, natscreds.File))
		if err != nil {
			return err
		}
		nc, j, err := natsconn.JetStream(natsconn.Config{URL: "nats://" + listen, Name: "test", Extra: []nats.Option{nats.UserInfo(user, password)}})
		if err != nil {
			return err
		}
		t.Cleanup(nc.Close)
		js = j
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return js
}
