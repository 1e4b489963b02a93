package executor

import (
	"fmt"
	"slices"

	"github.com/moby/moby/client"
)

// BaselineSpec is the container a job of preset with the default limits
// runs in, from the same containerSpec as Run's, with the launcher replaced
// by entrypoint and no stdin: what a benchmark's engine ceiling creates,
// starts, waits for and removes (tools/bench phase (k)), so that the
// ceiling pays for exactly the hardening a sandbox does and cannot drift
// from it. The container carries the executor's labels, so Reap removes
// what a crashed benchmark leaves. Like DockerRunArgs' it runs as the
// first uid of Config.UIDs, unclaimed, under a name of its own, and
// without the user tables a sandbox mounts (users.go): two read-only binds
// of small files, written per sandbox.
func (e *Executor) BaselineSpec(preset string, entrypoint []string) (client.ContainerCreateOptions, error) {
	p, ok := e.cfg.Presets[preset]
	if !ok {
		return client.ContainerCreateOptions{}, fmt.Errorf("executor: unknown preset %q", preset)
	}
	if len(entrypoint) == 0 {
		return client.ContainerCreateOptions{}, fmt.Errorf("executor: BaselineSpec: an entrypoint is required")
	}
	spec := e.containerSpec(p.Image, "baseline-"+randHex(4), e.cfg.Defaults, e.cfg.UIDs.First, nil, nil)
	spec.Name = "sandfleet-baseline-" + randHex(6)
	c := *spec.Config
	c.Entrypoint = slices.Clone(entrypoint)
	c.Cmd = nil
	c.AttachStdin, c.OpenStdin, c.StdinOnce = false, false, false
	spec.Config = &c
	return spec, nil
}
