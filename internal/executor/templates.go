package executor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/templates"
)

// templateSet is the fleet's templates as the worker last heard of them
// (SetTemplates): a job naming one where it names a preset runs on it.
type templateSet struct {
	mu    sync.RWMutex
	m     map[string]*templates.Template
	pools map[string]*templatePool // by name: those with a pool, at their version
}

// SetTemplates replaces the templates this executor serves: the worker
// calls it with every registration as it changes (templates.Registry's
// Watch). A preset of the same name wins over a template.
func (e *Executor) SetTemplates(m map[string]*templates.Template) {
	e.templates.mu.Lock()
	defer e.templates.mu.Unlock()
	e.templates.m = maps.Clone(m)
	e.syncTemplatePools()
}

// Templates are the names of the operator's templates this executor
// serves.
func (e *Executor) Templates() []string { return e.templatesOf("") }

// templatesOf are the names of the templates a job of tenant may name:
// the operator's, and tenant's own (another tenant's are not its to learn).
func (e *Executor) templatesOf(tenant string) []string {
	e.templates.mu.RLock()
	defer e.templates.mu.RUnlock()
	var names []string
	for _, t := range e.templates.m {
		if t.Tenant == "" || t.Tenant == tenant {
			names = append(names, t.Name)
		}
	}
	sort.Strings(names)
	return slices.Compact(names)
}

// lookup is the preset a job of tenant ("" for the operator's) names as
// its image: a preset of the worker's; else tenant's own template of the
// name; else the operator's (then t is the template). Another tenant's
// template is never found: the name is looked up under the job's tenant's
// key, and a name no template may have (one of a key's form) under none.
func (e *Executor) lookup(tenant, name string) (p Preset, t *templates.Template, ok bool) {
	if p, ok := e.cfg.Presets[name]; ok {
		return p, nil, true
	}
	if !templates.ValidName(name) {
		return Preset{}, nil, false
	}
	e.templates.mu.RLock()
	if tenant != "" {
		t = e.templates.m[templates.Key(tenant, name)]
	}
	if t == nil {
		t = e.templates.m[templates.Key("", name)]
	}
	e.templates.mu.RUnlock()
	if t == nil {
		return Preset{}, nil, false
	}
	return Preset{Image: t.Image, MainFile: t.MainFile, Argv: t.Argv, Compile: t.Compile}, t, true
}

// tenantImage reports whether a tenant's template may run on image on
// this worker: the image of one of its presets or of an operator's
// template it serves, as the gateway checked at registration
// (templates.TenantImage). Checked again here, at each job, because an
// operator's template may have gone since, and because a registration
// reaching the bucket some other way must not start the worker's own
// images, which lack the sandbox's hardening.
func (e *Executor) tenantImage(image string) bool {
	for _, p := range e.cfg.Presets {
		if p.Image == image {
			return true
		}
	}
	e.templates.mu.RLock()
	defer e.templates.mu.RUnlock()
	for _, t := range e.templates.m {
		if t.Tenant == "" && t.Image == image {
			return true
		}
	}
	return false
}

// templateLimits are the defaults and caps of a template's jobs: its own
// where it sets them, the worker's otherwise, never past the worker's caps.
func (e *Executor) templateLimits(t *templates.Template) (limits.Limits, limits.Caps) {
	def := t.Limits.Fill(e.cfg.Defaults)
	caps := e.cfg.Caps
	m := t.MaxLimits
	lower := func(c *limits.Duration, v limits.Duration) {
		if v > 0 && v < *c {
			*c = v
		}
	}
	lowerSize := func(c *limits.Size, v limits.Size) {
		if v > 0 && v < *c {
			*c = v
		}
	}
	lower(&caps.Timeout, m.Timeout)
	lowerSize(&caps.Memory, m.Memory)
	lowerSize(&caps.Output, m.Output)
	lowerSize(&caps.Tmpfs, m.Tmpfs)
	if m.CPUs > 0 && m.CPUs < caps.CPUs {
		caps.CPUs = m.CPUs
	}
	if m.Pids > 0 && m.Pids < caps.Pids {
		caps.Pids = m.Pids
	}
	return def, caps
}

// execAPI is what start and ready checks need of the engine: the real
// client has it, the unit tests' fakes need not.
type execAPI interface {
	ExecCreate(ctx context.Context, containerID string, options client.ExecCreateOptions) (client.ExecCreateResult, error)
	ExecStart(ctx context.Context, execID string, options client.ExecStartOptions) (client.ExecStartResult, error)
	ExecInspect(ctx context.Context, execID string, options client.ExecInspectOptions) (client.ExecInspectResult, error)
}

// errNotReady is a template's sandbox whose start or ready check failed:
// the job's error, not the engine's.
var errNotReady = errors.New("the template's sandbox did not become ready")

// prepare runs a template's start command in s, then its ready check until
// it passes, before s gets its job's envelope: no job sees a sandbox of the
// template before both. Each runs as the sandbox's user, with the
// template's env, inside the sandbox's limits; the launcher waits for its
// envelope meanwhile, and the whole is bounded by ReadyWithin. A tenant's
// template is bounded by its job's timeout (lim's) as well: its start runs
// before the job's clock does, and a ready_timeout of the tenant's own
// must not give its code more of the sandbox than the worker's cap on a
// job's time, nor hold a slot longer.
func (e *Executor) prepare(ctx context.Context, s *sandbox, t *templates.Template, lim limits.Limits) error {
	if s.prepared || len(t.Start) == 0 && len(t.Ready) == 0 {
		return nil
	}
	api := e.execAPI()
	if api == nil {
		return fmt.Errorf("%w: this engine client runs no start or ready commands", errNotReady)
	}
	within := t.ReadyWithin()
	if t.Tenant != "" && lim.Timeout > 0 {
		within = min(within, lim.Timeout.D())
	}
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	env := make([]string, 0, len(t.Env))
	for k, v := range t.Env {
		env = append(env, k+"="+v)
	}
	run := func(cmd []string) (int, error) {
		c, err := api.ExecCreate(ctx, s.id, client.ExecCreateOptions{Cmd: cmd, Env: env, WorkingDir: "/workspace"})
		if err != nil {
			return 0, err
		}
		if _, err := api.ExecStart(ctx, c.ID, client.ExecStartOptions{Detach: true}); err != nil {
			return 0, err
		}
		for delay := 10 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
			in, err := api.ExecInspect(ctx, c.ID, client.ExecInspectOptions{})
			if err != nil {
				return 0, err
			}
			if !in.Running {
				return in.ExitCode, nil
			}
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(delay):
			}
		}
	}
	if len(t.Start) > 0 {
		code, err := run(t.Start)
		if err != nil {
			return fmt.Errorf("%w: start %q: %v", errNotReady, t.Start, err)
		}
		if code != 0 {
			return fmt.Errorf("%w: start %q exited %d", errNotReady, t.Start, code)
		}
	}
	for delay := 20 * time.Millisecond; len(t.Ready) > 0; delay = min(2*delay, time.Second) {
		code, err := run(t.Ready)
		if err != nil {
			return fmt.Errorf("%w: ready %q did not pass within %s: %v", errNotReady, t.Ready, within, err)
		}
		if code == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: ready %q did not pass within %s (it last exited %d)", errNotReady, t.Ready, within, code)
		case <-time.After(delay):
		}
	}
	return nil
}

// templateRef is what the result says of t, once this worker has t's
// image; a worker without it refuses the job, naming the image.
func (e *Executor) templateRef(ctx context.Context, t *templates.Template) (*templates.Ref, error) {
	if t.Tenant != "" && !e.tenantImage(t.Image) {
		return nil, fmt.Errorf("image: template %q names the image %s, which a tenant's template may not (%w)", t.Name, t.Image, errTenantImage)
	}
	id, err := e.resolveImage(ctx, t.Image, false)
	if errors.Is(err, ErrImageMissing) {
		return nil, fmt.Errorf("image: template %q needs the image %s, which this worker does not have (%w)", t.Name, t.Image, ErrImageMissing)
	}
	if err != nil {
		return nil, err
	}
	// A tenant's template runs on a sandbox image alone, whatever the
	// registry let through: a second line, should an operator's template
	// name another image.
	if t.Tenant != "" && !e.sandboxImage(t.Image) {
		return nil, fmt.Errorf("image: template %q names the image %s, which has no %s label: a tenant's template may not (%w)", t.Name, t.Image, SandboxLabel, errTenantImage)
	}
	return &templates.Ref{Name: t.Name, Tenant: t.Tenant, Version: t.Version, Digest: id}, nil
}

// errTenantImage is a tenant's template naming an image that is neither a
// preset's nor an operator's template's: its jobs are rejected.
var errTenantImage = errors.New("not a preset's image nor an operator's template's")

// execAPI is the engine's client for start and ready commands: the
// Docker client the executor was given or made (e.api wraps it with the
// calls' deadlines, which prepare's own bound replaces here).
func (e *Executor) execAPI() execAPI {
	switch {
	case e.cfg.Client != nil:
		return e.cfg.Client
	case e.ownClient != nil:
		return e.ownClient
	}
	if api, ok := e.api.(execAPI); ok {
		return api
	}
	return nil
}
