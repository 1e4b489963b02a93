package templates_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/templates"
)

func good() templates.Template {
	return templates.Template{Name: "repo-x", Image: "sandfleet/sandbox:latest", MainFile: "main.py",
		Argv: []string{"python3", "main.py"}, Start: []string{"sh", "-c", "touch /tmp/ready"},
		Ready: []string{"test", "-e", "/tmp/ready"}, Pool: 1}
}

func TestValidate(t *testing.T) {
	if tp := good(); tp.Validate() != nil {
		t.Fatalf("a good template refused: %v", tp.Validate())
	}
	for name, mut := range map[string]func(*templates.Template){
		"bad name":        func(tp *templates.Template) { tp.Name = "Repo X" },
		"a preset's name": func(tp *templates.Template) { tp.Name = "python" },
		"no image":        func(tp *templates.Template) { tp.Image = "" },
		"no main file":    func(tp *templates.Template) { tp.MainFile = "" },
		"no argv":         func(tp *templates.Template) { tp.Argv = nil },
		"pool too big":    func(tp *templates.Template) { tp.Pool = 1000 },
		"pool_max < pool": func(tp *templates.Template) { tp.Pool, tp.PoolMax = 4, 2 },
		"limits over caps": func(tp *templates.Template) {
			tp.Limits.Memory = 64 * limits.GiB
		},
		"ready_timeout": func(tp *templates.Template) { tp.ReadyTimeout = limits.Duration(time.Hour) },
	} {
		tp := good()
		mut(&tp)
		if err := tp.Validate(); !errors.Is(err, templates.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// Put gives each registration a version of its own; a watcher sees every
// change; a deleted template is gone from Get, List and the watch.
func TestRegistry(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	reg, err := templates.Open(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan map[string]*templates.Template, 16)
	go reg.Watch(t.Context(), func(m map[string]*templates.Template) { seen <- m })
	if m := <-seen; len(m) != 0 {
		t.Fatalf("an empty registry's first watch: %v", m)
	}
	v1, err := reg.Put(t.Context(), good())
	if err != nil {
		t.Fatal(err)
	}
	tp := good()
	tp.Description = "second"
	v2, err := reg.Put(t.Context(), tp)
	if err != nil || v2.Version <= v1.Version {
		t.Fatalf("second put: %v %+v (first version %d)", err, v2, v1.Version)
	}
	got, err := reg.Get(t.Context(), "", "repo-x")
	if err != nil || got.Version != v2.Version || got.Description != "second" {
		t.Errorf("Get: %v %+v", err, got)
	}
	testutil.Eventually(t, 30*time.Second, "the watch sees version 2", func() bool {
		for {
			select {
			case m := <-seen:
				if m["repo-x"] != nil && m["repo-x"].Version == v2.Version {
					return true
				}
			default:
				return false
			}
		}
	})
	if _, err := reg.Put(t.Context(), templates.Template{Name: "bad"}); !errors.Is(err, templates.ErrInvalid) {
		t.Errorf("an invalid put: %v", err)
	}
	if err := reg.Delete(t.Context(), "", "repo-x"); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Get(t.Context(), "", "repo-x"); !errors.Is(err, templates.ErrNotFound) {
		t.Errorf("Get after Delete: %v", err)
	}
	if err := reg.Delete(t.Context(), "", "repo-x"); !errors.Is(err, templates.ErrNotFound) {
		t.Errorf("a second Delete: %v", err)
	}
	if l, err := reg.List(t.Context(), ""); err != nil || len(l) != 0 {
		t.Errorf("List after Delete: %v %v", err, l)
	}
}

// A tenant's templates are its own: stored under its key, listed, read and
// removed by it alone; the operator's and other tenants' are neither
// shadowed nor reached by a tenant's name, however it is spelled.
func TestTenantTemplates(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	reg, err := templates.Open(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, p := t.Context(), templates.TenantPolicy{}
	tenantTemplate := func(name string) templates.Template {
		return templates.Template{Name: name, Image: "sandfleet/sandbox:latest", MainFile: "main.py", Argv: []string{"python3", "main.py"}}
	}
	op := good()
	op.Name, op.Image, op.Description = "t1", "sandfleet/task-x:1", "the operator's"
	if _, err := reg.Put(ctx, op); err != nil {
		t.Fatal(err)
	}
	a := tenantTemplate("t1")
	a.Description = "a's"
	stored, err := reg.PutTenant(ctx, "team-a", a, p)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Tenant != "team-a" || stored.Name != "t1" {
		t.Errorf("stored as %q of %q", stored.Name, stored.Tenant)
	}
	if got, err := reg.Get(ctx, "team-a", "t1"); err != nil || got.Description != "a's" {
		t.Errorf("a's Get: %v %+v", err, got)
	}
	if got, err := reg.Get(ctx, "", "t1"); err != nil || got.Description != "the operator's" {
		t.Errorf("the operator's t1 after a's put: %v %+v", err, got)
	}
	for _, name := range []string{"t1", "_tenant.team-a.t1", "team-a.t1", "../team-a/t1", "*", ">", "T1"} {
		if got, err := reg.Get(ctx, "team-b", name); !errors.Is(err, templates.ErrNotFound) {
			t.Errorf("b's Get(%q): %v %+v, want not found", name, err, got)
		}
		if err := reg.Delete(ctx, "team-b", name); !errors.Is(err, templates.ErrNotFound) {
			t.Errorf("b's Delete(%q): %v, want not found", name, err)
		}
	}
	// The operator's names do not reach a tenant's keys either.
	for _, name := range []string{"_tenant.team-a.t1", "_tenant.team-a.>", "_tenant.*.t1"} {
		if got, err := reg.Get(ctx, "", name); !errors.Is(err, templates.ErrNotFound) {
			t.Errorf("the operator's Get(%q): %v %+v, want not found", name, err, got)
		}
		if err := reg.Delete(ctx, "", name); !errors.Is(err, templates.ErrNotFound) {
			t.Errorf("the operator's Delete(%q): %v, want not found", name, err)
		}
	}
	if l, err := reg.List(ctx, "team-b"); err != nil || len(l) != 0 {
		t.Errorf("b's List: %v %v", err, l)
	}
	if l, err := reg.List(ctx, "team-a"); err != nil || len(l) != 1 || l[0].Tenant != "team-a" {
		t.Errorf("a's List: %v %v", err, l)
	}
	if l, err := reg.List(ctx, ""); err != nil || len(l) != 1 || l[0].Tenant != "" {
		t.Errorf("the operator's List shows a tenant's: %v %v", err, l)
	}
	b := tenantTemplate("t1")
	if _, err := reg.PutTenant(ctx, "team-b", b, p); err != nil {
		t.Fatal(err)
	}
	if got, _ := reg.Get(ctx, "team-a", "t1"); got == nil || got.Description != "a's" {
		t.Errorf("b's put of t1 reached a's: %+v", got)
	}

	for name, c := range map[string]struct {
		tenant string
		mut    func(*templates.Template)
	}{
		"the worker's image":               {"team-a", func(tp *templates.Template) { tp.Image = "sandfleet/worker:latest" }},
		"an image by digest":               {"team-a", func(tp *templates.Template) { tp.Image = "sha256:0123" }},
		"a pool":                           {"team-a", func(tp *templates.Template) { tp.Pool = 1 }},
		"a pool_max":                       {"team-a", func(tp *templates.Template) { tp.PoolMax = 1 }},
		"another tenant in the body":       {"team-a", func(tp *templates.Template) { tp.Tenant = "team-b" }},
		"a key in the name":                {"team-a", func(tp *templates.Template) { tp.Name = "_tenant.team-b.t1" }},
		"a wildcard":                       {"team-a", func(tp *templates.Template) { tp.Name = "t.>" }},
		"a star":                           {"team-a", func(tp *templates.Template) { tp.Name = "t.*" }},
		"an empty token":                   {"team-a", func(tp *templates.Template) { tp.Name = "a..b" }},
		"a trailing dot":                   {"team-a", func(tp *templates.Template) { tp.Name = "a." }},
		"uppercase":                        {"team-a", func(tp *templates.Template) { tp.Name = "T1" }},
		"a long name":                      {"team-a", func(tp *templates.Template) { tp.Name = strings.Repeat("a", 65) }},
		"a preset's name":                  {"team-a", func(tp *templates.Template) { tp.Name = "python" }},
		"limits past the fleet's caps":     {"team-a", func(tp *templates.Template) { tp.Limits.Memory = 64 * limits.GiB }},
		"a tenant with a dot":              {"team.a", func(*templates.Template) {}},
		"a main_file out of the workspace": {"team-a", func(tp *templates.Template) { tp.MainFile = "../main.py" }},
		"an absolute main_file":            {"team-a", func(tp *templates.Template) { tp.MainFile = "/etc/main.py" }},
		"a NUL in start":                   {"team-a", func(tp *templates.Template) { tp.Start = []string{"sh", "-c", "a\x00b"} }},
		"an empty ready command":           {"team-a", func(tp *templates.Template) { tp.Ready = []string{""} }},
		"an env name with =":               {"team-a", func(tp *templates.Template) { tp.Env = map[string]string{"A=B": "x"} }},
		"a tenant with a wildcard":         {">", func(*templates.Template) {}},
	} {
		tp := tenantTemplate("t2")
		c.mut(&tp)
		if _, err := reg.PutTenant(ctx, c.tenant, tp, p); !errors.Is(err, templates.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := reg.Put(ctx, templates.Template{Name: "x", Tenant: "team-a", Image: "i", MainFile: "m", Argv: []string{"a"}}); !errors.Is(err, templates.ErrInvalid) {
		t.Errorf("an operator's Put with a tenant: %v, want ErrInvalid", err)
	}
	// The operator's template's image is one a tenant may name.
	if _, err := reg.PutTenant(ctx, "team-a", templates.Template{Name: "on-x", Image: "sandfleet/task-x:1",
		MainFile: "main.py", Argv: []string{"python3", "main.py"}}, p); err != nil {
		t.Errorf("a tenant's template of the operator's template's image: %v", err)
	}

	// The cap: a's third is refused under a cap of 2; a new version of
	// one it holds is not; b's count is its own.
	two := templates.TenantPolicy{MaxTemplates: 2}
	if _, err := reg.PutTenant(ctx, "team-a", tenantTemplate("t3"), two); !errors.Is(err, templates.ErrFull) {
		t.Errorf("a's third under a cap of 2: %v, want ErrFull", err)
	}
	if _, err := reg.PutTenant(ctx, "team-a", tenantTemplate("t1"), two); err != nil {
		t.Errorf("a new version at the cap: %v", err)
	}
	if _, err := reg.PutTenant(ctx, "team-b", tenantTemplate("t3"), two); err != nil {
		t.Errorf("b's second: %v", err)
	}

	if err := reg.Delete(ctx, "team-a", "t1"); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Get(ctx, "team-b", "t1"); err != nil {
		t.Errorf("a's delete of t1 removed b's: %v", err)
	}
	if _, err := reg.Get(ctx, "", "t1"); err != nil {
		t.Errorf("a's delete of t1 removed the operator's: %v", err)
	}
}

// The default cap is 16: a tenant's 17th is refused.
func TestTenantTemplateCap(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	reg, err := templates.Open(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	put := func(i int) error {
		_, err := reg.PutTenant(t.Context(), "team-a", templates.Template{Name: fmt.Sprintf("t%d", i), Image: "sandfleet/sandbox:latest",
			MainFile: "main.py", Argv: []string{"python3", "main.py"}}, templates.TenantPolicy{})
		return err
	}
	for i := range templates.DefaultTenantTemplates {
		if err := put(i); err != nil {
			t.Fatalf("template %d: %v", i+1, err)
		}
	}
	if err := put(templates.DefaultTenantTemplates); !errors.Is(err, templates.ErrFull) {
		t.Errorf("the 17th: %v, want ErrFull", err)
	}
}

// A watcher sees a tenant's template under its key, and drops a value
// written under a key that is not its own (a tenant's claimed by the
// operator's key, or another tenant's).
func TestWatchKeys(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	reg, err := templates.Open(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.PutTenant(t.Context(), "team-a", templates.Template{Name: "t1", Image: "sandfleet/sandbox:latest",
		MainFile: "main.py", Argv: []string{"python3", "main.py"}}, templates.TenantPolicy{}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), templates.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	forged := `{"name":"t1","tenant":"team-a","image":"sandfleet/worker:latest","main_file":"m","argv":["x"]}`
	for _, key := range []string{"t1", templates.Key("team-b", "t1"), templates.Key("team-a", "t2")} {
		if _, err := kv.Put(t.Context(), key, []byte(forged)); err != nil {
			t.Fatal(err)
		}
	}
	seen := make(chan map[string]*templates.Template, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go reg.Watch(ctx, func(m map[string]*templates.Template) {
		select {
		case seen <- m:
		default:
		}
	})
	m := <-seen
	if len(m) != 1 || m[templates.Key("team-a", "t1")] == nil || m[templates.Key("team-a", "t1")].Image != "sandfleet/sandbox:latest" {
		t.Errorf("the watch: %v, want a's t1 alone", m)
	}
	if _, err := reg.Get(t.Context(), "team-b", "t1"); err == nil {
		t.Error("Get returned a value stored under another's key")
	}
}

// Tenants together hold at most MaxTenantTemplates, so that the operator
// keeps room: past it a tenant's new template is refused, the operator's
// is not.
func TestTenantsShareOfTheRegistry(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	reg, err := templates.Open(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	p := templates.TenantPolicy{MaxTemplates: templates.MaxTenantTemplates}
	tp := func(name string) templates.Template {
		return templates.Template{Name: name, Image: "sandfleet/sandbox:latest", MainFile: "main.py", Argv: []string{"python3", "main.py"}}
	}
	for i := range templates.MaxTenantTemplates {
		if _, err := reg.PutTenant(t.Context(), fmt.Sprintf("team-%d", i%4), tp(fmt.Sprintf("t%d", i)), p); err != nil {
			t.Fatalf("the tenants' template %d: %v", i+1, err)
		}
	}
	if _, err := reg.PutTenant(t.Context(), "team-9", tp("one-more"), p); !errors.Is(err, templates.ErrFull) {
		t.Errorf("past the tenants' share: %v, want ErrFull", err)
	}
	if _, err := reg.Put(t.Context(), tp("ops")); err != nil {
		t.Errorf("the operator's past the tenants' share: %v", err)
	}
}

// Puts of new names at once never leave a tenant past its cap: each
// counts again once its key is made, and undoes it when over.
func TestTenantCapUnderConcurrentPuts(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	reg, err := templates.Open(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	const max, puts = 4, 24
	errs := make(chan error, puts)
	for i := range puts {
		go func() {
			_, err := reg.PutTenant(t.Context(), "team-a", templates.Template{Name: fmt.Sprintf("t%d", i), Image: "sandfleet/sandbox:latest",
				MainFile: "main.py", Argv: []string{"python3", "main.py"}}, templates.TenantPolicy{MaxTemplates: max})
			errs <- err
		}()
	}
	stored := 0
	for range puts {
		switch err := <-errs; {
		case err == nil:
			stored++
		case !errors.Is(err, templates.ErrFull):
			t.Errorf("a put: %v", err)
		}
	}
	l, err := reg.List(t.Context(), "team-a")
	if err != nil {
		t.Fatal(err)
	}
	if len(l) > max || len(l) != stored {
		t.Errorf("%d puts succeeded, %d templates held; the cap is %d", stored, len(l), max)
	}
}
