package templates

import (
	"context"
	"slices"
	"strings"

	"github.com/sandfleet/sandfleet/internal/fleet"
)

// Tenants' templates: their keys, apart from the operator's and from each
// other's, and the policy that bounds them.

// tenantPrefix starts the key of every tenant's template,
// _tenant.<tenant>.<name>: no operator's template's name begins with a '_',
// and no tenant's name holds a dot, so a key says whose template it is
// and one tenant's names never reach another's key or the operator's.
const tenantPrefix = "_tenant."

// Key is the KV key of tenant's template name ("" tenant: the operator's).
func Key(tenant, name string) string {
	if tenant == "" {
		return name
	}
	return tenantPrefix + tenant + "." + name
}

// parseKey is Key's inverse; ok is false for a key no registration has.
func parseKey(key string) (tenant, name string, ok bool) {
	rest, isTenant := strings.CutPrefix(key, tenantPrefix)
	if !isTenant {
		return "", key, ValidName(key)
	}
	tenant, name, _ = strings.Cut(rest, ".")
	return tenant, name, fleet.ValidTenant(tenant) && ValidName(name)
}

// PresetImages are the images of the built-in presets, which a tenant's
// template may name besides those of the operator's templates.
var PresetImages = []string{"sandfleet/sandbox:latest", "sandfleet/sandbox-langs:latest", "sandfleet/sandbox-data:latest"}

// DefaultTenantTemplates is TenantPolicy.MaxTemplates's default.
const DefaultTenantTemplates = 16

// TenantPolicy bounds the templates of tenants: who runs a sandbox is not
// trusted with the worker's host, so a tenant's template names no image
// but one the fleet already runs sandboxes of (PresetImages, or an image
// of an operator's template: never another local image, such as the
// worker's own, which lacks the sandbox's hardening), and holds no warm
// pool (a pool holds every serving worker's resources for one tenant).
// Its limits are within the fleet's caps as an operator's are, and each
// worker cuts them to its own caps.
type TenantPolicy struct {
	// MaxTemplates is the most templates one tenant holds, within the
	// registry's MaxTemplates for all. Defaults to DefaultTenantTemplates.
	MaxTemplates int
}

func (p TenantPolicy) max() int {
	if p.MaxTemplates <= 0 {
		return DefaultTenantTemplates
	}
	return p.MaxTemplates
}

// TenantImage reports whether a tenant's template may name image, given
// the operator's templates: exactly the image of a built-in preset or of
// one of them (the same string; a digest of it is another name).
func TenantImage(image string, operators []*Template) bool {
	if slices.Contains(PresetImages, image) {
		return true
	}
	return slices.ContainsFunc(operators, func(t *Template) bool { return t.Tenant == "" && t.Image == image })
}

// PutTenant registers t as tenant's own template, within p: an image of
// a built-in preset or of an operator's template, no pool, and at most
// p's MaxTemplates of the tenant's. t's Tenant, if set, must be tenant.
func (r *Registry) PutTenant(ctx context.Context, tenant string, t Template, p TenantPolicy) (*Template, error) {
	if !fleet.ValidTenant(tenant) {
		return nil, invalid("tenant %q is no tenant's name", tenant)
	}
	if t.Tenant != "" && t.Tenant != tenant {
		return nil, invalid("tenant %q is not the caller's %q", t.Tenant, tenant)
	}
	t.Tenant = tenant
	if err := t.Validate(); err != nil {
		return nil, err
	}
	operators, err := r.List(ctx, "")
	if err != nil {
		return nil, err
	}
	if !TenantImage(t.Image, operators) {
		return nil, invalid("image %q: a tenant's template names the image of a built-in preset (%s) or of one of the operator's templates",
			t.Image, strings.Join(PresetImages, ", "))
	}
	return r.put(ctx, t, []keyCap{
		{tenantPrefix + tenant + ".>", p.max(), "tenant " + tenant + "'s templates"},
		{tenantPrefix + ">", MaxTenantTemplates, "the tenants' templates together"},
	})
}
