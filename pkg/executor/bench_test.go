package executor

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"testing"

	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// Compare with:
//
//	go test ./pkg/executor -run '^$' -bench Trivial -benchtime 20x
//
// BenchmarkTrivialJob is the executor's full path for print(6*7): create,
// attach, wait, start, envelope, output, inspect, remove.
func BenchmarkTrivialJob(b *testing.B) {
	e := setup(b, nil)
	for b.Loop() {
		res, err := e.Run(context.Background(), job("print(6*7)"))
		if err != nil || res.Status != jobs.StatusSucceeded || res.Stdout != "42\n" {
			b.Fatalf("%+v %v", res, err)
		}
	}
}

// BenchmarkDockerRunTrivial runs the same hardened job with `docker run
// --rm`, the envelope on stdin, as a baseline.
func BenchmarkDockerRunTrivial(b *testing.B) {
	requireDocker(b)
	if _, err := exec.LookPath("docker"); err != nil {
		b.Skip("no docker CLI")
	}
	l := limits.Default()
	env, err := buildEnvelope(job("print(6*7)"), DefaultPresets()["python"])
	if err != nil {
		b.Fatal(err)
	}
	tmpfs := fmt.Sprintf("rw,nosuid,nodev,size=%d,uid=%d,gid=%d,mode=0755", int64(l.Tmpfs), sandboxUID, sandboxGID)
	args := []string{"run", "--rm", "-i", "--user", fmt.Sprintf("%d:%d", sandboxUID, sandboxGID),
		"--network", "none", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--tmpfs", "/tmp:" + tmpfs, "--tmpfs", "/workspace:" + tmpfs,
		"--memory", l.Memory.String(), "--memory-swap", l.Memory.String(), "--cpus", fmt.Sprint(l.CPUs),
		"--pids-limit", fmt.Sprint(l.Pids), "--ulimit", "nofile=1024:1024", "--ulimit", fmt.Sprintf("fsize=%d", int64(l.Tmpfs)),
		"--ulimit", "core=0", "--init", "--log-driver", "none", "--runtime", "runc",
		"--label", LabelManaged + "=true", "--label", LabelWorker + "=bench-docker-run", DefaultImage}
	for b.Loop() {
		cmd := exec.Command("docker", args...)
		cmd.Stdin = bytes.NewReader(env.header)
		out, err := cmd.Output()
		if err != nil || !bytes.HasPrefix(out, []byte("42\n")) {
			b.Fatalf("docker run: %q %v", out, err)
		}
	}
}
