package templates_test

import (
	"errors"
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
	got, err := reg.Get(t.Context(), "repo-x")
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
	if err := reg.Delete(t.Context(), "repo-x"); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Get(t.Context(), "repo-x"); !errors.Is(err, templates.ErrNotFound) {
		t.Errorf("Get after Delete: %v", err)
	}
	if err := reg.Delete(t.Context(), "repo-x"); !errors.Is(err, templates.ErrNotFound) {
		t.Errorf("a second Delete: %v", err)
	}
	if l, err := reg.List(t.Context()); err != nil || len(l) != 0 {
		t.Errorf("List after Delete: %v %v", err, l)
	}
}
