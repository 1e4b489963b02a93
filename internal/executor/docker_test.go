package executor

import (
	"strings"
	"testing"
)

func TestDockerRunArgs(t *testing.T) {
	t.Parallel()
	e, err := newWithAPI(Config{WorkerID: "w"}, &fakeDocker{})
	if err != nil {
		t.Fatal(err)
	}
	args, err := e.DockerRunArgs("python")
	if err != nil {
		t.Fatal(err)
	}
	got := " " + strings.Join(args, " ") + " "
	for _, want := range []string{
		" --rm -i ", " --user 100000:100000 ", " --network none ", " --read-only ", " --cgroupns private ",
		" --security-opt seccomp=/",
		" --cap-drop ALL ", " --security-opt no-new-privileges ", " --memory 536870912 ",
		" --memory-swap 536870912 ", " --cpus 1 ", " --pids-limit 64 ", " --ulimit core=0:0 ",
		" --log-driver none ", " --tmpfs /tmp:rw,nosuid,nodev,", " --label sandfleet.worker=w ",
		" " + DefaultImage + " ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("docker run args %q lack %q", got, want)
		}
	}
	if strings.Contains(got, " --init ") {
		t.Error("--init: the launcher is PID 1")
	}
	if _, err := e.DockerRunArgs("nope"); err == nil {
		t.Error("unknown preset accepted")
	}
}
