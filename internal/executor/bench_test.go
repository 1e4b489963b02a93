package executor

import (
	"bytes"
	"context"
	"os/exec"
	"testing"

	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// Compare with:
//
//	go test ./internal/executor -run '^$' -bench Trivial -benchtime 20x
//
// BenchmarkTrivialJob is the executor's full path for print(6*7): create,
// attach, wait, start, envelope, output, inspect, remove.
func BenchmarkTrivialJob(b *testing.B) {
	e := setup(b, nil)
	for b.Loop() {
		res, err := e.Run(context.Background(), job("print(6*7)"), jobrun.Options{})
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
	e := setup(b, nil)
	env, err := buildEnvelope(job("print(6*7)"), DefaultPresets()["python"], limits.Default(), jobrun.Options{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	args, err := e.DockerRunArgs("python")
	if err != nil {
		b.Fatal(err)
	}
	args = append([]string{"run"}, args...)
	for b.Loop() {
		cmd := exec.Command("docker", args...)
		cmd.Stdin = bytes.NewReader(env.header)
		out, err := cmd.Output()
		if err != nil || !bytes.HasPrefix(out, []byte("42\n")) {
			b.Fatalf("docker run: %q %v", out, err)
		}
	}
}

// BenchmarkPooledJob is BenchmarkTrivialJob handed to a warm sandbox: the
// pool is refilled between iterations, outside the timer, so this is the
// latency a job sees when the pool has one ready.
func BenchmarkPooledJob(b *testing.B) {
	e := setup(b, func(c *Config) { c.Pool = 1 })
	for b.Loop() {
		b.StopTimer()
		waitIdle(b, e, 1, 0)
		b.StartTimer()
		res, err := e.Run(context.Background(), job("print(6*7)"), jobrun.Options{})
		if err != nil || res.Status != jobs.StatusSucceeded || res.Stdout != "42\n" {
			b.Fatalf("%+v %v", res, err)
		}
	}
	if st := e.PoolStats(); st.Misses > 0 {
		b.Fatalf("pool missed: %+v", st)
	}
}
