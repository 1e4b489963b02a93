package executor

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestBaselineSpec: the engine ceiling's container differs from a job's
// only in what it runs and in having no stdin; the hardening is the same.
func TestBaselineSpec(t *testing.T) {
	t.Parallel()
	e, err := newWithAPI(Config{WorkerID: "w"}, &fakeDocker{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.BaselineSpec("python", []string{"/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	want := e.containerSpec(DefaultImage, "x", e.cfg.Defaults, e.cfg.UIDs.First, nil, nil)
	if !slices.Equal(got.Config.Entrypoint, []string{"/bin/true"}) || got.Config.Cmd != nil {
		t.Errorf("entrypoint %q, cmd %q: want [/bin/true] and none", got.Config.Entrypoint, got.Config.Cmd)
	}
	if got.Config.OpenStdin || got.Config.AttachStdin {
		t.Error("the baseline keeps stdin open: nothing feeds it")
	}
	if got.Config.Image != want.Config.Image || got.Config.User != want.Config.User || !got.Config.NetworkDisabled {
		t.Errorf("config %+v: want the image, user and network of a job's", got.Config)
	}
	// The host side is the hardening: exactly a job's.
	if !reflect.DeepEqual(got.HostConfig, want.HostConfig) {
		t.Errorf("host config differs from a job's:\n got %+v\nwant %+v", got.HostConfig, want.HostConfig)
	}
	if got.Config.Labels[LabelWorker] != "w" || got.Config.Labels[LabelManaged] != "true" {
		t.Errorf("labels %v: Reap could not find a leftover", got.Config.Labels)
	}
	if _, err := e.BaselineSpec("nope", []string{"/bin/true"}); err == nil {
		t.Error("unknown preset accepted")
	}
	if _, err := e.BaselineSpec("python", nil); err == nil {
		t.Error("no entrypoint accepted")
	}
}

// The sandbox image starts its processes with the executor's
// deterministic defaults, so that the interpreter the launcher starts
// before the job is known fits the jobs that carry them.
func TestImageHasDeterministicEnv(t *testing.T) {
	t.Parallel()
	// The data image's too: its prestarted interpreter fits only a job
	// whose environment is all the image's.
	for _, name := range []string{"Dockerfile", "data/Dockerfile"} {
		df, err := os.ReadFile("../../sandbox-image/" + name)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range DeterministicEnv {
			if !strings.Contains(string(df), "    "+k+"="+v+" ") {
				t.Errorf("sandbox-image/%s's ENV lacks %s=%s", name, k, v)
			}
		}
	}
}
