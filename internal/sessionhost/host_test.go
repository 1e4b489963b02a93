package sessionhost_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/sessionhost"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// fakeSandbox answers exec with the number of runs so far; it stands in
// for internal/executor's Session at the host's one boundary.
type fakeSandbox struct {
	runs   *atomic.Int64
	done   chan struct{}
	once   sync.Once
	closed atomic.Bool
}

var _ sessionhost.Sandbox = (*fakeSandbox)(nil)

func (f *fakeSandbox) Do(_ context.Context, req *envelope.Request) (*envelope.Reply, error) {
	select {
	case <-f.done:
		return nil, errors.New("ended")
	default:
	}
	switch req.Op {
	case sessionapi.OpCode:
		return codeReply(req), nil
	case sessionapi.OpMkdir:
		var fr sessionapi.FileRequest
		_ = json.Unmarshal(req.Body, &fr)
		return &envelope.Reply{ID: req.ID, Error: sessionapi.Errorf(sessionapi.ErrExists, "mkdir %s: file exists", fr.Path)}, nil
	case sessionapi.OpProcesses:
		return answer(req, []sessionapi.Process{{PID: 7, Cmd: []string{"sleep", "9"}, Running: true, Started: 1}}), nil
	}
	if req.Op != sessionapi.OpExec {
		return answer(req, struct{}{}), nil
	}
	argv := execArgv(req)
	if len(argv) == 2 && argv[0] == "sleep" {
		d, _ := time.ParseDuration(argv[1]) // a command that runs that long, unless the sandbox ends
		select {
		case <-time.After(d):
		case <-f.done:
			return nil, errors.New("ended")
		}
	}
	n := int(f.runs.Add(1))
	if len(argv) == 2 && argv[0] == "yes" {
		size, _ := strconv.Atoi(argv[1]) // a command that writes that much
		return answer(req, sessionapi.ExecResult{ExitCode: &n, Stdout: strings.Repeat("y", size)}), nil
	}
	return answer(req, sessionapi.ExecResult{ExitCode: &n, Stdout: strings.Join(argv, " ")}), nil
}

// execArgv is an exec request's command.
func execArgv(req *envelope.Request) []string {
	var ex sessionapi.ExecRequest
	_ = json.Unmarshal(req.Body, &ex)
	return ex.Cmd
}

// answer is the fake agent's reply to req: result, the sessionapi result
// of its op.
func answer(req *envelope.Request, result any) *envelope.Reply {
	b, _ := json.Marshal(result)
	return &envelope.Reply{ID: req.ID, Result: b}
}

func (f *fakeSandbox) Close(context.Context) { f.closed.Store(true); f.end() }
func (f *fakeSandbox) end()                  { f.once.Do(func() { close(f.done) }) }
func (f *fakeSandbox) Done() <-chan struct{} { return f.done }
func (f *fakeSandbox) Why() string           { return "" }
func (f *fakeSandbox) ImageID() string       { return "sha256:fake" }

var _ sessionhost.Networked = (*fakeSandbox)(nil)

func (f *fakeSandbox) SetNetwork(_ context.Context, n *limits.Network) (limits.Limits, error) {
	l := limits.Default()
	if !n.None() {
		l.Network = n
	}
	return l, nil
}

func (f *fakeSandbox) Egress(context.Context) ([]limits.NetworkUse, error) {
	return []limits.NetworkUse{{Host: "a.test:443", Allowed: true, Connections: 1}}, nil
}

// Archive: the fake keeps no files, and its sessions do not persist.
func (f *fakeSandbox) Archive(context.Context, io.Writer) (*envelope.ArchiveReport, error) {
	return nil, errors.New("the fake sandbox keeps no files")
}

type bundle struct {
	client *sessions.Client
	boxes  chan *fakeSandbox
	runs   *atomic.Int64
}

func setup(t *testing.T, cfg sessionhost.Config) *bundle {
	t.Helper()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	b := &bundle{boxes: make(chan *fakeSandbox, 16), runs: &atomic.Int64{}}
	start := func(context.Context, sessionhost.StartSpec) (sessionhost.Sandbox, error) {
		f := &fakeSandbox{runs: b.runs, done: make(chan struct{})}
		b.boxes <- f
		return f, nil
	}
	if cfg.Limits == nil {
		cfg.Limits = func(_, _ string, l limits.Limits) (limits.Limits, error) {
			return limits.Resolve(l, limits.Default(), limits.DefaultCaps())
		}
	}
	h, err := sessionhost.New(t.Context(), js, start, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	_, cjs := natstest.Connect(t, srv.ClientURL())
	if b.client, err = sessions.NewClient(t.Context(), cjs, "alice"); err != nil {
		t.Fatal(err)
	}
	// Run subscribes in its goroutine: wait until a create is answered.
	testutil.Eventually(t, 10*time.Second, "the host listening", func() bool {
		s, err := b.client.Create(t.Context(), sessions.Spec{})
		if err == nil {
			b.client.Delete(t.Context(), s.ID)
		}
		return err == nil
	})
	return b
}

// A session is its owner's: another owner's calls and reads are as for a
// session that does not exist.
func TestOwnerOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, sessionhost.Config{Worker: "w"})
	ctx := t.Context()
	s, err := b.client.Create(ctx, sessions.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	mallory := b.client.As("mallory")
	if _, err := mallory.Get(ctx, s.ID); !errors.Is(err, sessionapi.ErrNotFound) {
		t.Errorf("another owner's Get: %v", err)
	}
	if _, err := mallory.Exec(ctx, s.ID, "", sessionapi.ExecRequest{Cmd: []string{"id"}}); !errors.Is(err, sessionapi.ErrNotFound) {
		t.Errorf("another owner's Exec: %v", err)
	}
	if list, err := mallory.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("another owner's List: %v %v", list, err)
	}
	if _, err := b.client.Exec(ctx, s.ID, "", sessionapi.ExecRequest{Cmd: []string{"id"}}); err != nil {
		t.Errorf("the owner's Exec: %v", err)
	}
}

// A retried call with the same key gets the first answer and runs
// nothing again; another key runs again.
func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setup(t, sessionhost.Config{Worker: "w"})
	ctx := t.Context()
	s, _ := b.client.Create(ctx, sessions.Spec{})
	before := b.runs.Load()
	r1, _ := b.client.Exec(ctx, s.ID, "k1", sessionapi.ExecRequest{Cmd: []string{"append"}})
	r2, _ := b.client.Exec(ctx, s.ID, "k1", sessionapi.ExecRequest{Cmd: []string{"append"}})
	r3, _ := b.client.Exec(ctx, s.ID, "k2", sessionapi.ExecRequest{Cmd: []string{"append"}})
	if got := b.runs.Load() - before; got != 2 || *r1.ExitCode != *r2.ExitCode || *r3.ExitCode == *r1.ExitCode {
		t.Errorf("%d runs, answers %d %d %d: want 2 runs, the retry answered as the first", got, *r1.ExitCode, *r2.ExitCode, *r3.ExitCode)
	}
}

// A full host stops taking creates: the next is ErrFull at once; room
// again once one ends.
func TestCapacity(t *testing.T) {
	t.Parallel()
	b := setup(t, sessionhost.Config{Worker: "w", Max: 1})
	ctx := t.Context()
	s, err := b.client.Create(ctx, sessions.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := b.client.Create(ctx, sessions.Spec{}); !errors.Is(err, sessionapi.ErrFull) {
		t.Fatalf("a create past Max: %v, want ErrFull", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refused after %s: want at once", d)
	}
	if _, err := b.client.Delete(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "room again", func() bool {
		_, err := b.client.Create(ctx, sessions.Spec{})
		return err == nil
	})
}

// Idle past its timeout, a session ends and its record says so; a call
// then is ErrGone. A sandbox that ends by itself is lost.
func TestIdleAndLost(t *testing.T) {
	t.Parallel()
	b := setup(t, sessionhost.Config{Worker: "w"})
	ctx := t.Context()
	idle, _ := b.client.Create(ctx, sessions.Spec{IdleTimeout: limits.Duration(time.Second)})
	testutil.Eventually(t, 20*time.Second, "the idle session ended", func() bool {
		info, err := b.client.Get(ctx, idle.ID)
		return err == nil && info.Status == sessions.StatusEnded && info.EndReason == sessions.EndIdle
	})
	if _, err := b.client.Exec(ctx, idle.ID, "", sessionapi.ExecRequest{Cmd: []string{"x"}}); !errors.Is(err, sessionapi.ErrGone) {
		t.Errorf("a call to the idle-ended session: %v, want ErrGone", err)
	}
	for len(b.boxes) > 0 {
		<-b.boxes
	}
	lost, _ := b.client.Create(ctx, sessions.Spec{})
	(<-b.boxes).end() // its sandbox ends by itself
	testutil.Eventually(t, 20*time.Second, "the session lost", func() bool {
		info, err := b.client.Get(ctx, lost.ID)
		return err == nil && info.EndReason == sessions.EndLost
	})
	if _, err := b.client.Create(ctx, sessions.Spec{MaxLifetime: limits.Duration(48 * time.Hour)}); !errors.Is(err, sessionapi.ErrCap) ||
		sessionapi.AsError(err).Cap != sessionapi.CapMaxLifetime {
		t.Errorf("max_lifetime over the cap: %v, want ErrCap naming max_lifetime", err)
	}
	if _, err := b.client.Create(ctx, sessions.Spec{IdleTimeout: limits.Duration(2 * time.Hour)}); !errors.Is(err, sessionapi.ErrCap) ||
		sessionapi.AsError(err).Cap != sessionapi.CapIdleTimeout {
		t.Errorf("idle_timeout over the cap: %v, want ErrCap naming idle_timeout", err)
	}
	if _, err := b.client.Create(ctx, sessions.Spec{Limits: limits.Limits{Memory: 64 * limits.GiB}}); !errors.Is(err, sessionapi.ErrInvalid) ||
		!strings.Contains(err.Error(), "memory") {
		t.Errorf("limits over the caps: %v, want ErrInvalid naming memory", err)
	}
}

// A worker that starts again records the sessions of its earlier run as
// lost: their sandboxes ended with it.
func TestRestartMarksLost(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	kv, err := sessionhost.EnsureBucket(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	put := func(id, worker, status string) {
		b, _ := json.Marshal(sessions.Info{ID: id, Worker: worker, Status: status, Owner: "alice"})
		if _, err := kv.Put(t.Context(), id, b); err != nil {
			t.Fatal(err)
		}
	}
	put("mine", "w", sessions.StatusRunning)
	put("theirs", "other", sessions.StatusRunning)
	h, err := sessionhost.New(t.Context(), js, nil, sessionhost.Config{Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	defer func() { stop(); <-done }()
	c, _ := sessions.NewClient(t.Context(), js, "alice")
	testutil.Eventually(t, 10*time.Second, "mine recorded lost", func() bool {
		info, err := c.Get(t.Context(), "mine")
		return err == nil && info.EndReason == sessions.EndLost
	})
	if info, _ := c.Get(t.Context(), "theirs"); info.Status != sessions.StatusRunning {
		t.Errorf("another worker's session: %+v, want it left running", info)
	}
}

// A call that runs past the session's idle timeout (an exec's timeout may
// be longer) is activity: the session does not end under it as idle, and
// the call gets its own answer.
func TestIdleNotDuringACall(t *testing.T) {
	t.Parallel()
	b := setup(t, sessionhost.Config{Worker: "w"})
	ctx := t.Context()
	s, err := b.client.Create(ctx, sessions.Spec{IdleTimeout: limits.Duration(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.client.Exec(ctx, s.ID, "", sessionapi.ExecRequest{Cmd: []string{"sleep", "4s"}})
	if err != nil || r.ExitCode == nil {
		t.Fatalf("a call of 4 s in a session idle after 1 s: %+v %v, want its answer", r, err)
	}
	testutil.Eventually(t, 20*time.Second, "the session idle after the call", func() bool {
		info, err := b.client.Get(ctx, s.ID)
		return err == nil && info.EndReason == sessions.EndIdle
	})
}

// An answer over what a NATS message may carry (the test server's 8 MiB)
// is refused by the server: the call gets ErrLimit at once, not the wait
// for an answer that never comes.
func TestAnswerOverThePayload(t *testing.T) {
	t.Parallel()
	b := setup(t, sessionhost.Config{Worker: "w"})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	s, err := b.client.Create(ctx, sessions.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Exec(ctx, s.ID, "", sessionapi.ExecRequest{Cmd: []string{"yes", "9000000"}}); !errors.Is(err, sessionapi.ErrLimit) {
		t.Fatalf("an answer of 9 MB: %v, want ErrLimit", err)
	}
	if r, err := b.client.Exec(ctx, s.ID, "", sessionapi.ExecRequest{Cmd: []string{"yes", "1000"}}); err != nil || len(r.Stdout) != 1000 {
		t.Fatalf("the next call: %v", err)
	}
}

// A session's network changes while it runs, within the worker's caps:
// its info then shows the new policy (and, live, its egress); beyond the
// caps is invalid, naming the rule.
func TestSetNetwork(t *testing.T) {
	t.Parallel()
	caps := limits.DefaultCaps()
	caps.Network = &limits.Network{Allow: []limits.Rule{{Host: "a.test"}}}
	b := setup(t, sessionhost.Config{Worker: "w", Limits: func(_, _ string, l limits.Limits) (limits.Limits, error) {
		return limits.Resolve(l, limits.Default(), caps)
	}})
	ctx := t.Context()
	s, err := b.client.Create(ctx, sessions.Spec{Limits: limits.Limits{Network: caps.Network}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.SetNetwork(ctx, s.ID, &limits.Network{Allow: []limits.Rule{{Host: "b.test"}}}); !errors.Is(err, sessionapi.ErrInvalid) ||
		!strings.Contains(err.Error(), "network.allow[0]") {
		t.Errorf("beyond the caps: %v, want invalid naming the rule", err)
	}
	info, err := b.client.SetNetwork(ctx, s.ID, nil)
	if err != nil || info.Limits.Network != nil || len(info.Egress) != 1 {
		t.Fatalf("lock: %+v %v", info, err)
	}
	if got, err := b.client.Get(ctx, s.ID); err != nil || got.Limits.Network != nil {
		t.Errorf("after the lock, the session's limits.network is %v (%v)", got.Limits.Network, err)
	}
}

// What the sandbox's agent answers reaches the caller as the agent gave
// it: its error's code and message, its processes.
func TestAgentAnswersForwarded(t *testing.T) {
	t.Parallel()
	b := setup(t, sessionhost.Config{Worker: "w"})
	ctx := t.Context()
	s, err := b.client.Create(ctx, sessions.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.client.File(ctx, s.ID, sessionapi.OpMkdir, sessionapi.FileRequest{Path: "d"})
	if e := sessionapi.AsError(err); !errors.Is(err, sessionapi.ErrExists) || e.Message != "mkdir d: file exists" {
		t.Errorf("mkdir of a path that exists: %v, want the agent's exists", err)
	}
	ps, err := b.client.Processes(ctx, s.ID)
	if err != nil || len(ps) != 1 || ps[0].PID != 7 || strings.Join(ps[0].Cmd, " ") != "sleep 9" || !ps[0].Running {
		t.Errorf("processes: %+v %v, want the agent's", ps, err)
	}
}
