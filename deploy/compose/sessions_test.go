package compose

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/sessionhost"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// echoSandbox stands in for a session's sandbox: an exec answers with
// its argv. What is under test is the roles' permissions.
type echoSandbox struct {
	done chan struct{}
	once sync.Once
}

func (e *echoSandbox) Do(_ context.Context, req *envelope.Request) (*envelope.Reply, error) {
	var ex sessionapi.ExecRequest
	_ = json.Unmarshal(req.Body, &ex)
	zero := 0
	res, _ := json.Marshal(sessionapi.ExecResult{ExitCode: &zero, Stdout: ex.Shell})
	return &envelope.Reply{ID: req.ID, Result: res}, nil
}
func (e *echoSandbox) Close(context.Context) { e.once.Do(func() { close(e.done) }) }
func (e *echoSandbox) Done() <-chan struct{} { return e.done }
func (e *echoSandbox) Why() string           { return "" }
func (e *echoSandbox) ImageID() string       { return "" }
func (e *echoSandbox) Archive(context.Context, io.Writer) (*envelope.ArchiveReport, error) {
	return nil, errors.New("the echo sandbox keeps no files")
}

// Sessions under nats.conf's roles: the worker role takes creates and
// answers its sessions' calls and writes their records; the submitter
// (the gateway's role) creates, calls, reads and records a lost one.
func TestSessionsUnderRoles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wrk, sub := roles(t, ctx, fleet.Topology{})
	h, err := sessionhost.New(ctx, wrk.js, func(context.Context, sessionhost.StartSpec) (sessionhost.Sandbox, error) {
		return &echoSandbox{done: make(chan struct{})}, nil
	}, sessionhost.Config{Worker: "w-roles"})
	if err != nil {
		t.Fatal(err)
	}
	hctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Run(hctx) }()
	defer func() { stop(); <-done }()
	c, err := sessions.NewClient(ctx, sub.js, "tok")
	if err != nil {
		t.Fatal(err)
	}
	var s *sessions.Info
	testutil.Eventually(t, 20*time.Second, "a create answered", func() bool {
		s, err = c.Create(ctx, sessions.Spec{})
		return err == nil
	})
	r, err := c.Exec(ctx, s.ID, "k", sessionapi.ExecRequest{Shell: "echo roles"})
	if err != nil || r.Stdout != "echo roles" {
		t.Fatalf("exec: %+v %v", r, err)
	}
	if info, err := c.Get(ctx, s.ID); err != nil || info.Worker != "w-roles" {
		t.Fatalf("the record: %+v %v", info, err)
	}
	if _, err := c.Delete(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, s.ID, "", sessionapi.ExecRequest{Shell: "x"}); !errors.Is(err, sessionapi.ErrGone) {
		t.Errorf("exec after delete: %v, want ErrGone", err)
	}
	for _, c := range []*conn{wrk, sub} {
		select {
		case v := <-c.violations:
			t.Errorf("a permissions violation: %v", v)
		default:
		}
	}
}
