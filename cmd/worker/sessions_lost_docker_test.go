package main

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// The owning worker SIGKILLed mid-session: the next call is ErrGone at
// once, never a hang, and the record says lost; the session's sandbox
// ends with the worker's attach stream, so no container of the worker is
// left, without a reaper and with the worker never restarted.
func TestSessionWorkerKilledDocker(t *testing.T) {
	t.Parallel()
	workertest.Sandbox(t, executor.Config{WorkerID: "probe"}) // Docker and the image answer, or skip
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	id := fmt.Sprintf("sess-kill-%d", os.Getpid())
	w := dockerWorker(t, srv.ClientURL(), id, "--pool", "0", "--sessions", "2")
	client, err := sessions.NewClient(t.Context(), js, "")
	if err != nil {
		t.Fatal(err)
	}
	var s *sessions.Info
	testutil.Eventually(t, 60*time.Second, "a session created", func() bool {
		s, err = client.Create(t.Context(), sessions.Spec{IdleTimeout: 600_000_000_000})
		return err == nil
	})
	if _, err := client.Exec(t.Context(), s.ID, "", sessionapi.ExecRequest{Cmd: []string{"sleep", "1000"}, Background: true}); err != nil {
		t.Fatal(err)
	}
	if n := len(containers(t, executor.LabelWorker+"="+id)); n != 1 {
		t.Fatalf("%d containers of the worker, want its session's", n)
	}
	w.kill()
	start := time.Now()
	_, err = client.Exec(t.Context(), s.ID, "", sessionapi.ExecRequest{Cmd: []string{"true"}})
	if !errors.Is(err, sessionapi.ErrGone) {
		t.Fatalf("a call after the worker's death: %v, want ErrGone", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("answered after %s: want at once", d)
	}
	if info, err := client.Get(t.Context(), s.ID); err != nil || info.EndReason != sessions.EndLost {
		t.Errorf("the record: %+v %v, want ended lost", info, err)
	}
	// Its agent ends it: at once when the worker's stream to it closes, at
	// the latest when the deadman (30 s) runs out without a ping.
	testutil.Eventually(t, 60*time.Second, "the session's container stopped", func() bool {
		return len(running(t, executor.LabelWorker+"="+id)) == 0
	})
	t.Logf("the sandbox stopped %s after the worker's death", time.Since(start).Round(time.Second))
	// What is left of it the worker's reaper removes when it starts again;
	// once that worker says it is ready, its start-up's trial sandbox is
	// gone too.
	restarted := time.Now()
	dockerWorker(t, srv.ClientURL(), id, "--pool", "0", "--sessions", "2")
	jc, err := jobs.NewClient(t.Context(), js, jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the restarted worker ready", func() bool {
		st, err := jc.Status(t.Context())
		if err != nil {
			return false
		}
		for _, w := range st.Workers {
			if w.ID == id && w.Ready && w.StartedAt.After(restarted) {
				return true
			}
		}
		return false
	})
	testutil.Eventually(t, 60*time.Second, "the stopped container reaped", func() bool {
		return len(containers(t, executor.LabelWorker+"="+id)) == 0
	})
}

// running lists the running containers with the labels.
func running(t *testing.T, labels ...string) []string {
	t.Helper()
	return dockerPS(t, "-q", labels)
}
