package executor

import (
	"slices"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/templates"
)

// A job finds its tenant's own template first, then the operator's; never
// another tenant's, whatever it names (a key's form, a wildcard) or
// whatever the listing of the allowed names would tell it.
func TestTenantLookup(t *testing.T) {
	t.Parallel()
	e := &Executor{cfg: Config{Presets: DefaultPresets()}}
	tmpl := func(tenant, name, image string) *templates.Template {
		return &templates.Template{Name: name, Tenant: tenant, Image: image, MainFile: "main.py", Argv: []string{"python3", "main.py"}}
	}
	e.templates.m = map[string]*templates.Template{}
	for _, tp := range []*templates.Template{
		tmpl("", "t1", "sandfleet/task-x:1"),
		tmpl("team-a", "t1", DefaultImage),
		tmpl("team-a", "mine", DefaultImage),
		tmpl("team-b", "secret", DefaultImage),
		tmpl("team-b", "escape", "sandfleet/worker:latest"),
		tmpl("team-b", "on-x", "sandfleet/task-x:1"),
	} {
		e.templates.m[templates.Key(tp.Tenant, tp.Name)] = tp
	}
	for _, c := range []struct {
		tenant, name string
		want         *templates.Template // nil: not found
	}{
		{"team-a", "t1", e.templates.m[templates.Key("team-a", "t1")]},
		{"team-a", "mine", e.templates.m[templates.Key("team-a", "mine")]},
		{"team-b", "t1", e.templates.m["t1"]},
		{"", "t1", e.templates.m["t1"]},
		{"team-c", "t1", e.templates.m["t1"]},
		{"team-a", "secret", nil},
		{"", "secret", nil},
		{"team-a", "_tenant.team-b.secret", nil},
		{"", "_tenant.team-b.secret", nil},
		{"team-a", "team-b.secret", nil},
		{"team-a", ">", nil},
	} {
		_, got, ok := e.lookup(c.tenant, c.name)
		if got != c.want || ok != (c.want != nil) {
			t.Errorf("lookup(%q, %q) = %+v %v, want %+v", c.tenant, c.name, got, ok, c.want)
		}
	}
	if p, got, ok := e.lookup("team-a", "python"); !ok || got != nil || p.Image != DefaultImage {
		t.Errorf("a preset's name: %+v %+v %v", p, got, ok)
	}
	if names := e.templatesOf("team-a"); !slices.Equal(names, []string{"mine", "t1"}) {
		t.Errorf("what team-a's job is told it may name: %v", names)
	}
	if names := e.Templates(); !slices.Equal(names, []string{"t1"}) {
		t.Errorf("the operator's templates: %v", names)
	}
	for image, want := range map[string]bool{
		DefaultImage: true, "sandfleet/task-x:1": true, "sandfleet/worker:latest": false, "sandfleet/nats:latest": false,
	} {
		if got := e.tenantImage(image); got != want {
			t.Errorf("tenantImage(%s) = %v, want %v", image, got, want)
		}
	}
	// A job's tenant is its ID's: team-b's job naming its template of the
	// worker's image is rejected before any engine call; team-a's naming
	// team-b's template is told of no such image, and not of b's names.
	if _, msg := e.accept(t.Context(), &jobs.Job{ID: "team-b.j1", Image: "escape"}, jobrun.Options{}); !strings.Contains(msg, "a tenant's template may not") {
		t.Errorf("a tenant's template of the worker's image: %q", msg)
	}
	_, msg := e.accept(t.Context(), &jobs.Job{ID: "team-a.j1", Image: "secret"}, jobrun.Options{})
	if !strings.Contains(msg, "unknown preset or template") || strings.Contains(msg, "on-x") || strings.Contains(msg, "escape") {
		t.Errorf("team-a's job naming team-b's template: %q", msg)
	}
	// Every built-in preset's image is one the gateway lets a tenant's
	// template name.
	for name, p := range DefaultPresets() {
		if !slices.Contains(templates.PresetImages, p.Image) {
			t.Errorf("preset %s's image %s is not in templates.PresetImages", name, p.Image)
		}
	}
}
