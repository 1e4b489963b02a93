package executor

import (
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/templates"
)

// A session's limits are filled as a job's: with its template's defaults
// (its tenant's own template before the operator's), within the
// template's caps; a preset's with the worker's.
func TestSessionLimitsOfTemplate(t *testing.T) {
	t.Parallel()
	e := &Executor{cfg: Config{Presets: DefaultPresets(), Defaults: limits.Default(), Caps: limits.DefaultCaps()}}
	tmpl := func(tenant string, timeout, max time.Duration) *templates.Template {
		return &templates.Template{Name: "t1", Tenant: tenant, Image: DefaultImage, MainFile: "main.py", Argv: []string{"python3", "main.py"},
			Limits: limits.Limits{Timeout: limits.Duration(timeout)}, MaxLimits: limits.Limits{Timeout: limits.Duration(max)}}
	}
	e.templates.m = map[string]*templates.Template{}
	for _, tp := range []*templates.Template{tmpl("", 7*time.Second, time.Minute), tmpl("team-a", 9*time.Second, 20*time.Second)} {
		e.templates.m[templates.Key(tp.Tenant, tp.Name)] = tp
	}
	for _, c := range []struct {
		tenant, image string
		ask, want     time.Duration // 0: the default wanted
		refused       bool
	}{
		{"", "t1", 0, 7 * time.Second, false},
		{"team-b", "t1", 0, 7 * time.Second, false},
		{"team-a", "t1", 0, 9 * time.Second, false},
		{"team-a", "t1", 15 * time.Second, 15 * time.Second, false},
		{"team-a", "t1", 30 * time.Second, 0, true}, // over team-a's template's cap
		{"", "t1", 30 * time.Second, 30 * time.Second, false},
		{"team-a", "python", 0, limits.Default().Timeout.D(), false},
	} {
		got, err := e.ResolveLimits(c.tenant, c.image, limits.Limits{Timeout: limits.Duration(c.ask)})
		if c.refused != (err != nil) || (!c.refused && got.Timeout.D() != c.want) {
			t.Errorf("tenant %q, %s, asking %s: timeout %s, error %v; want %s (refused %v)", c.tenant, c.image, c.ask, got.Timeout, err, c.want, c.refused)
		}
	}
}
