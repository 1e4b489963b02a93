package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"time"

	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/templates"
)

// admitted is what a job or a session runs on once the executor took it:
// the preset (a template's, for one on a template), the template and what
// a result says of it, the limits resolved within the caps, and the
// environment with the template's under the caller's own.
type admitted struct {
	preset Preset
	tmpl   *templates.Template
	ref    *templates.Ref
	lim    limits.Limits
	env    map[string]string
}

// admission is the one check a job and a session pass before a sandbox is
// theirs. image is looked up as tenant's ("" for the operator's): a
// preset, else tenant's own template of the name, else the operator's. A
// template brings its image (which this worker must have, and a tenant's
// may name only as TenantImage allows), its limits' defaults and caps and
// its env; an optional preset's image must be here. want is resolved
// within the caps. The error says why the caller is refused; every error
// is a refusal, as an engine failure of the image's lookup is the
// launch's to meet.
func (e *Executor) admission(ctx context.Context, tenant, image string, want limits.Limits, env map[string]string) (admitted, error) {
	var a admitted
	preset, tmpl, ok := e.lookup(tenant, image)
	if !ok {
		return a, fmt.Errorf("image: unknown preset or template %q (this worker allows %s)",
			image, strings.Join(append(e.Presets(), e.templatesOf(tenant)...), ", "))
	}
	def, caps := e.cfg.Defaults, e.cfg.Caps
	if tmpl != nil {
		ref, err := e.templateRef(ctx, tmpl)
		if errors.Is(err, ErrImageMissing) || errors.Is(err, errTenantImage) {
			return a, err
		}
		a.tmpl, a.ref = tmpl, ref
		def, caps = e.templateLimits(tmpl)
		if len(tmpl.Env) > 0 {
			// The caller's variable of the same name wins.
			merged := maps.Clone(tmpl.Env)
			maps.Copy(merged, env)
			env = merged
		}
	} else if preset.Optional {
		if _, err := e.resolveImage(ctx, preset.Image, false); errors.Is(err, ErrImageMissing) {
			return a, fmt.Errorf("image: preset %q needs the image %s, which this worker does not have (%s)",
				image, preset.Image, e.buildHint(preset.Image))
		}
	}
	lim, err := limits.Resolve(want, def, caps)
	if err != nil {
		return a, err
	}
	a.preset, a.lim, a.env = preset, lim, env
	return a, nil
}

// sandboxFor is the sandbox an admitted job or session runs in: a warm
// one of its template's pool, or of the presets' pool when its limits
// fit it (taken, or awaited while a launch is in flight), else one made
// for it. A sandbox with a network is registered with the egress proxy
// under a's policy before it is returned: nothing of the caller's runs in
// it before. The caller ends it with leave.
func (e *Executor) sandboxFor(ctx context.Context, log *slog.Logger, a admitted, id string) (*sandbox, error) {
	s, err := e.warmOrNew(ctx, log, a, id)
	if err != nil {
		return nil, err
	}
	if s.net != nil {
		if err := e.cfg.Egress.Admit(ctx, s.id, *s.net, a.lim.Network); err != nil {
			e.release(ctx, log, s)
			return nil, infraErr("egress", err)
		}
	}
	return s, nil
}

// warmOrNew is sandboxFor's sandbox, before the egress proxy knows it.
// A template's sandbox is its pool's or a new one (never the presets'
// pool's: its start and ready must run first).
func (e *Executor) warmOrNew(ctx context.Context, log *slog.Logger, a admitted, id string) (*sandbox, error) {
	image, lim := a.preset.Image, a.lim
	if a.tmpl != nil {
		if s := e.templateSandbox(a.tmpl, lim); s != nil {
			log.Debug("handed a warm sandbox of its template", "container", s.short, "template", a.tmpl.Name)
			return s, nil
		}
	}
	var s *sandbox
	if e.pool != nil && a.tmpl == nil && e.pool.fits(lim) {
		if s = e.pool.take(image); s == nil {
			s = e.pool.await(ctx, image)
		}
	}
	if s != nil {
		// cmd/worker's fault tests read this message: a job in a warm sandbox.
		log.Debug("handed a warm sandbox", "container", s.short, "age", time.Since(s.born).Round(time.Millisecond))
		return s, nil
	}
	return e.admit(ctx, image, id, lim)
}

// leave ends a sandbox of sandboxFor's: released from the egress proxy
// (what it carried is returned; nil without a network), then removed.
func (e *Executor) leave(ctx context.Context, log *slog.Logger, s *sandbox) []limits.NetworkUse {
	var use []limits.NetworkUse
	if s.net != nil {
		var err error
		if use, err = e.cfg.Egress.Release(context.WithoutCancel(ctx), s.id); err != nil {
			log.Error("releasing the sandbox from the egress proxy failed", "container", s.short, "error", err)
		}
	}
	e.release(ctx, log, s)
	return use
}
