package executor

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
)

// imageTTL is how long a resolved image ID is trusted: a rebuilt tag is
// picked up within it.
const imageTTL = 5 * time.Second

// images resolves the presets' image references to image IDs, which is
// what sandboxes are created from and what a result records: the tag may
// move, the ID names exactly the bytes that ran.
type images struct {
	mu sync.Mutex
	m  map[string]imageEntry
}

type imageEntry struct {
	id      string // "" when missing
	missing bool
	// sandbox: the image carries SandboxLabel.
	sandbox bool
	env     []string // the image's environment
	at      time.Time
}

// SandboxLabel is the label every sandbox image carries (sandbox-image/,
// and so every template image build.sh makes from one): the worker's own
// images and other local ones lack it, and the sandbox's hardening with it.
const SandboxLabel = "sandfleet.image"

// resolve returns ref's image ID, from the cache or the engine. A missing
// image is ErrImageMissing; a failing engine ErrInfrastructure.
func (e *Executor) resolveImage(ctx context.Context, ref string, fresh bool) (string, error) {
	e.imgs.mu.Lock()
	ent, ok := e.imgs.m[ref]
	e.imgs.mu.Unlock()
	if !ok || fresh || time.Since(ent.at) > imageTTL {
		info, err := e.api.ImageInspect(ctx, ref)
		switch {
		case cerrdefs.IsNotFound(err):
			ent = imageEntry{missing: true, at: time.Now()}
		case err != nil:
			return "", infraErr("inspect image "+ref, err)
		default:
			ent = imageEntry{id: info.ID, at: time.Now()}
			if info.Config != nil {
				ent.sandbox = info.Config.Labels[SandboxLabel] != ""
				ent.env = info.Config.Env
			}
		}
		e.imgs.mu.Lock()
		if e.imgs.m == nil {
			e.imgs.m = map[string]imageEntry{}
		}
		e.imgs.m[ref] = ent
		e.imgs.mu.Unlock()
	}
	if ent.missing {
		return "", fmt.Errorf("%w: %s (%s)", ErrImageMissing, ref, e.buildHint(ref))
	}
	return ent.id, nil
}

// sandboxImage reports whether ref, as last resolved (resolveImage),
// carries SandboxLabel.
func (e *Executor) sandboxImage(ref string) bool {
	e.imgs.mu.Lock()
	defer e.imgs.mu.Unlock()
	return e.imgs.m[ref].sandbox
}

// imageEnv is ref's environment, as last resolved.
func (e *Executor) imageEnv(ref string) []string {
	e.imgs.mu.Lock()
	defer e.imgs.mu.Unlock()
	return e.imgs.m[ref].env
}

// known reports whether ref was last seen present: the pool fills only
// those of the optional presets' images.
func (e *Executor) known(ref string) bool {
	e.imgs.mu.Lock()
	defer e.imgs.mu.Unlock()
	ent, ok := e.imgs.m[ref]
	return ok && !ent.missing
}

// buildHint says how to build ref.
func (e *Executor) buildHint(ref string) string {
	// By repository: another tag of one (SANDBOX_IMAGE=TAG) is built the same way.
	repo, _, _ := strings.Cut(ref, ":")
	switch repo + ":" {
	case strings.SplitAfter(LangsImage, ":")[0]:
		return "build it with make images-all, or sandbox-image/build.sh langs"
	case strings.SplitAfter(DataImage, ":")[0]:
		return "build it with make images-all, or sandbox-image/build.sh data"
	}
	return "build it with sandbox-image/build.sh"
}

// ImageDigests returns each preset's image ID as last resolved ("" when
// missing or not resolved yet), by preset name.
func (e *Executor) ImageDigests() map[string]string {
	out := map[string]string{}
	e.imgs.mu.Lock()
	defer e.imgs.mu.Unlock()
	for name, p := range e.cfg.Presets {
		out[name] = e.imgs.m[p.Image].id
	}
	return out
}
