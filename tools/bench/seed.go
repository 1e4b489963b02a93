package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/executor"
)

// seed runs a job the seed's way (its Python DockerSandbox.execute, in
// docker-py: containers.run(detach=True), then wait, logs and remove):
// one container per job through the Engine API, created and started, waited
// for, its logs read from the default log driver, and removed, with the
// seed's limits (512m, 1 CPU, network disabled, a read-only root, a 64m
// tmpfs on /tmp) and nothing else of sandfleet's hardening. The code goes
// as a list, python3 -c CODE, in place of the sandbox image's launcher.
type seed struct {
	cli   *client.Client
	image string
}

func newSeed(image string) (*seed, error) {
	if image == "" {
		image = executor.DefaultImage
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, err
	}
	return &seed{cli: cli, image: image}, nil
}

func (s *seed) close() { s.cli.Close() }

// run is one job; it fails unless the job exits 0 with output.
func (s *seed) run(ctx context.Context, code string) (err error) {
	c, err := s.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: "sandfleet-bench-seed-" + hexID(6),
		Config: &container.Config{
			Image:           s.image,
			Entrypoint:      []string{"python3", "-c"},
			Cmd:             []string{code},
			NetworkDisabled: true,
			Labels:          map[string]string{"sandfleet.bench": "seed"},
		},
		HostConfig: &container.HostConfig{
			NetworkMode:    "none",
			ReadonlyRootfs: true,
			Tmpfs:          map[string]string{"/tmp": "size=64m"},
			Resources:      container.Resources{Memory: 512 << 20, NanoCPUs: 1e9},
		},
	})
	if err != nil {
		return fmt.Errorf("seed: create: %w", err)
	}
	removed := false
	defer func() {
		if !removed { // a failed step leaves nothing behind
			_, _ = s.cli.ContainerRemove(context.WithoutCancel(ctx), c.ID, client.ContainerRemoveOptions{Force: true})
		}
	}()
	if _, err := s.cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("seed: start: %w", err)
	}
	wait := s.cli.ContainerWait(ctx, c.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	var status int64
	select {
	case r := <-wait.Result:
		status = r.StatusCode
	case err := <-wait.Error:
		return fmt.Errorf("seed: wait: %w", err)
	}
	logs, err := s.cli.ContainerLogs(ctx, c.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return fmt.Errorf("seed: logs: %w", err)
	}
	var out bytes.Buffer
	_, err = stdcopy.StdCopy(&out, &out, logs)
	logs.Close()
	if err != nil {
		return fmt.Errorf("seed: logs: %w", err)
	}
	if _, err := s.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{}); err != nil {
		return fmt.Errorf("seed: remove: %w", err)
	}
	removed = true
	if status != 0 || out.Len() == 0 {
		return fmt.Errorf("seed: exit %d, output %q", status, out.String())
	}
	return nil
}

// ceiling is the engine's own ceiling for a fresh sandbox: a container with
// sandfleet's hardening (executor.BaselineSpec) running /bin/true, created,
// started, waited for and removed, and nothing else: no attach, no job.
type ceiling struct {
	cli *client.Client
	e   *executor.Executor
	ids sync.Map // the containers it made, for the engine meter
}

// ours reports whether the ceiling made the container.
func (c *ceiling) ours(id string) bool {
	_, ok := c.ids.Load(id)
	return ok
}

// presetsFor is the default presets on image; nil (the defaults) for "".
func presetsFor(image string) map[string]executor.Preset {
	if image == "" {
		return nil
	}
	ps := executor.DefaultPresets()
	for n, p := range ps {
		p.Image = image
		ps[n] = p
	}
	return ps
}

func newCeiling(image string) (*ceiling, error) {
	e, err := executor.New(executor.Config{WorkerID: "bench-ceiling", Presets: presetsFor(image)})
	if err != nil {
		return nil, err
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		e.Close()
		return nil, err
	}
	return &ceiling{cli: cli, e: e}, nil
}

func (c *ceiling) close() {
	c.cli.Close()
	c.e.Close()
}

// steps are the wall times of one container's life.
type steps struct{ create, start, wait, remove time.Duration }

func (c *ceiling) run(ctx context.Context) (st steps, err error) {
	spec, err := c.e.BaselineSpec("python", []string{"/bin/true"})
	if err != nil {
		return st, err
	}
	t := time.Now()
	cr, err := c.cli.ContainerCreate(ctx, spec)
	if err != nil {
		return st, fmt.Errorf("ceiling: create: %w", err)
	}
	st.create = time.Since(t)
	c.ids.Store(cr.ID, true)
	removed := false
	defer func() {
		if !removed {
			_, _ = c.cli.ContainerRemove(context.WithoutCancel(ctx), cr.ID, client.ContainerRemoveOptions{Force: true})
		}
	}()
	// Registered before the start, as the executor does, so that the exit
	// of a container that ends at once is seen.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wait := c.cli.ContainerWait(wctx, cr.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	t = time.Now()
	if _, err := c.cli.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err != nil {
		return st, fmt.Errorf("ceiling: start: %w", err)
	}
	st.start = time.Since(t)
	t = time.Now()
	select {
	case r := <-wait.Result:
		if r.StatusCode != 0 {
			return st, fmt.Errorf("ceiling: /bin/true exited %d", r.StatusCode)
		}
	case err := <-wait.Error:
		return st, fmt.Errorf("ceiling: wait: %w", err)
	}
	st.wait = time.Since(t)
	t = time.Now()
	if _, err := c.cli.ContainerRemove(ctx, cr.ID, client.ContainerRemoveOptions{}); err != nil {
		return st, fmt.Errorf("ceiling: remove: %w", err)
	}
	st.remove, removed = time.Since(t), true
	return st, nil
}

// dockerRunner runs a job as `docker run --rm` with the executor's own
// hardening (executor.DockerRunArgs) and the envelope on stdin.
type dockerRunner struct {
	e    *executor.Executor
	args []string
}

func newDockerRunner(image string) (*dockerRunner, error) {
	e, err := executor.New(executor.Config{WorkerID: "bench-docker-run", Presets: presetsFor(image)})
	if err != nil {
		return nil, err
	}
	args, err := e.DockerRunArgs("python")
	if err != nil {
		e.Close()
		return nil, err
	}
	return &dockerRunner{e: e, args: append([]string{"run"}, args...)}, nil
}

func (d *dockerRunner) close() { d.e.Close() }

func (d *dockerRunner) run(ctx context.Context, code string) error {
	seal := envelope.NewSeal()
	h := &envelope.Header{Argv: []string{"python3", "main.py"}, Dir: "/workspace", Key: seal.Key,
		Files: []envelope.File{{Name: "main.py", Data: []byte(code)}}}
	env, err := envelope.Marshal(h)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "docker", d.args...)
	cmd.Stdin = bytes.NewReader(env)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("docker run: %w: %s", err, stderr.String())
	}
	if len(out) == 0 {
		return errors.New("docker run: no output")
	}
	return nil
}

func hexID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
