package executor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/templates"
)

// A tenant's session is admitted as its jobs are: it may start on the
// tenant's own template, which brings its env (under the session's own)
// and runs its start before the agent's envelope; another tenant's
// session, and the operator's, are told of no such image.
func TestIntegrationSessionTenantTemplate(t *testing.T) {
	t.Parallel()
	for _, rt := range attackRuntimes(t) {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			sessionOnTenantTemplate(t, setup(t, func(c *Config) { c.Runtime = rt }))
		})
	}
}

func sessionOnTenantTemplate(t *testing.T, e *Executor) {
	py := e.cfg.Presets["python"]
	mine := &templates.Template{Name: "mine", Tenant: "team-a", Image: py.Image, MainFile: py.MainFile, Argv: py.Argv,
		Env:   map[string]string{"FROM_TEMPLATE": "team-a", "BOTH": "template"},
		Start: []string{"sh", "-c", "echo started > /workspace/started"}}
	e.SetTemplates(map[string]*templates.Template{templates.Key("team-a", "mine"): mine})

	s := startSession(t, e, SessionSpec{Tenant: "team-a", Image: "mine", Env: map[string]string{"BOTH": "session"}})
	r := okReply(t, do(t, s, ask{Op: sessionapi.OpExec, Shell: `cat /workspace/started; echo "$FROM_TEMPLATE $BOTH"`}))
	if r.Exit == nil || *r.Exit != 0 || string(r.Stdout) != "started\nteam-a session\n" {
		t.Fatalf("exec on the tenant's template: exit %v stdout %q stderr %q", r.Exit, r.Stdout, r.Stderr)
	}

	for _, tenant := range []string{"team-b", ""} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		ss, err := e.StartSession(ctx, SessionSpec{ID: "sess-" + randHex(4), Tenant: tenant, Image: "mine"})
		cancel()
		if err == nil {
			ss.Close(context.Background())
			t.Fatalf("tenant %q started a session on team-a's template", tenant)
		}
		if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "unknown preset or template") {
			t.Errorf("tenant %q on team-a's template: %v", tenant, err)
		}
	}
}
