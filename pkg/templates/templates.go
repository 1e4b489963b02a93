// Package templates is the fleet's registry of templates: named,
// operator-registered environments a job or session names wherever it
// names a preset ("image": "NAME"). A template is an image the workers
// have (a local tag or a digest; never pulled by a worker) with the
// preset's commands, default and maximum limits, env, and a start
// command and ready check run in each of its sandboxes before any job
// sees it. Registrations live in the JetStream KV bucket TEMPLATES; a
// registration's version is its KV revision, so a result can say which
// registration it ran.
//
// A tenant may register templates of its own (PutTenant): they are its
// alone, kept under keys of its own (Key), named by its jobs only, and
// bounded by a TenantPolicy, since a tenant is not trusted with what the
// operator is: its template names an image the fleet already runs
// sandboxes of, holds no warm pool, and counts against a cap of its own.
package templates

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/field"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// Bucket is the KV bucket of the registrations, by name.
const Bucket = "TEMPLATES"

// Caps of the registry: a template's JSON, how many there may be, and
// how many of them all tenants together may hold (so that tenants cannot
// fill the registry against the operator).
const (
	MaxBytes           = 64 << 10
	MaxTemplates       = 256
	MaxTenantTemplates = MaxTemplates / 2
)

// Template is one registration.
type Template struct {
	Name string `json:"name"`
	// Tenant is the tenant whose template it is, "" for the operator's;
	// set by the registry from the key it is stored under, never taken
	// from a caller.
	Tenant      string `json:"tenant,omitempty"`
	Description string `json:"description,omitempty"`
	// Image is a local tag or a digest the workers that serve the
	// template have; a worker without it refuses the template's jobs.
	Image string `json:"image"`
	// MainFile, Argv and Compile are a preset's: a job's code is written
	// to MainFile, Argv runs it, Compile (if any) first.
	MainFile string   `json:"main_file"`
	Argv     []string `json:"argv"`
	Compile  []string `json:"compile,omitempty"`
	// Env is set in every sandbox of the template (a job's env adds to it).
	Env map[string]string `json:"env,omitempty"`
	// Limits are a job's defaults; MaxLimits the most a job of the
	// template may ask for, within the worker's own caps.
	Limits    limits.Limits `json:"limits,omitzero"`
	MaxLimits limits.Limits `json:"max_limits,omitzero"`
	// Start runs in each sandbox of the template as it starts, before any
	// job (a daemon it leaves behind keeps running); Ready runs after it,
	// again until it exits 0, and the sandbox is handed out only then
	// (within ReadyTimeout, default 30s; else the sandbox is discarded).
	Start        []string        `json:"start,omitempty"`
	Ready        []string        `json:"ready,omitempty"`
	ReadyTimeout limits.Duration `json:"ready_timeout,omitempty"`
	// Pool and PoolMax are the template's own warm pool on each worker
	// that serves it (0: none).
	Pool    int `json:"pool,omitempty"`
	PoolMax int `json:"pool_max,omitempty"`

	// Version is the registration's KV revision; set by the registry.
	Version uint64 `json:"version,omitempty"`
	// Updated is when it was registered; set by the registry.
	Updated time.Time `json:"updated,omitzero"`
}

// Ref is what a result says of the template its job ran on.
type Ref struct {
	Name string `json:"name"`
	// Tenant is the template's tenant, "" for the operator's.
	Tenant  string `json:"tenant,omitempty"`
	Version uint64 `json:"version"`
	// Digest is the image's ID on the worker that ran the job.
	Digest string `json:"digest,omitempty"`
}

var (
	validName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	// ErrInvalid wraps a registration that fails validation.
	ErrInvalid = errors.New("invalid template")
	// ErrNotFound is a name with no registration.
	ErrNotFound = errors.New("no such template")
	// ErrFull is a registry holding MaxTemplates already, or a tenant
	// holding its TenantPolicy's MaxTemplates.
	ErrFull = errors.New("the registry holds the most templates it may")
)

// Reserved are the names of the built-in presets: a template may not take
// one, as a worker's own preset of a name wins over a template of it.
var Reserved = []string{"python", "python-data", "shell", "node", "c", "cpp", "java", "go", "rust"}

// ValidName reports whether name may name a template: a KV key's token
// or dot-separated tokens, none empty (so no "a..b", no trailing dot).
func ValidName(name string) bool {
	return validName.MatchString(name) && !strings.Contains(name, "..") && !strings.HasSuffix(name, ".")
}

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
}

// Validate checks t, naming the field that is wrong.
func (t *Template) Validate() error {
	switch {
	case !ValidName(t.Name):
		return invalid("name %q must match %s, with no empty part between dots", t.Name, validName)
	case t.Tenant != "" && !fleet.ValidTenant(t.Tenant):
		return invalid("tenant %q is no tenant's name", t.Tenant)
	case t.Tenant != "" && (t.Pool != 0 || t.PoolMax != 0):
		return invalid("pool: a tenant's template has no warm pool (pool and pool_max 0)")
	case slices.Contains(Reserved, t.Name):
		return invalid("name %q is a built-in preset's", t.Name)
	case t.Image == "" || len(t.Image) > 256:
		return invalid("image: a local tag or digest is required (at most 256 bytes)")
	case t.MainFile == "" || len(t.MainFile) > 255:
		return invalid("main_file: the file a job's code is written to is required")
	case len(t.Argv) == 0:
		return invalid("argv: the command that runs a job is required")
	case t.Pool < 0 || t.Pool > 64:
		return invalid("pool: 0 to 64")
	case t.PoolMax != 0 && (t.PoolMax < t.Pool || t.PoolMax > 256):
		return invalid("pool_max: at least pool, at most 256")
	case t.ReadyTimeout < 0 || t.ReadyTimeout.D() > 10*time.Minute:
		return invalid("ready_timeout: at most 10m")
	case len(t.Env) > 64:
		return invalid("env: at most 64 variables")
	}
	for k := range t.Env {
		if k == "" || len(k) > 128 {
			return invalid("env: a name of 1 to 128 bytes")
		}
	}
	if t.Tenant != "" {
		// A tenant's commands, file and env are a job's, held to a
		// job's checks: its template is no way past them.
		for _, c := range []struct {
			field string
			err   error
		}{
			{"main_file", field.FileName(t.MainFile)}, {"argv", field.Argv(t.Argv)}, {"compile", field.Argv(t.Compile)},
			{"start", field.Argv(t.Start)}, {"ready", field.Argv(t.Ready)}, {"env", field.Env(t.Env)},
		} {
			if c.err != nil {
				return invalid("%s: %v", c.field, c.err)
			}
		}
	}
	if err := t.Limits.Fill(limits.Default()).Validate(limits.DefaultCaps()); err != nil {
		return invalid("limits: %v", err)
	}
	if err := t.MaxLimits.Fill(limits.Limits(limits.DefaultCaps())).Validate(limits.DefaultCaps()); err != nil {
		return invalid("max_limits: %v", err)
	}
	return nil
}

// ReadyWithin is how long the ready check may take.
func (t *Template) ReadyWithin() time.Duration {
	if t.ReadyTimeout > 0 {
		return t.ReadyTimeout.D()
	}
	return 30 * time.Second
}

// Registry is the TEMPLATES bucket.
type Registry struct {
	kv jetstream.KeyValue
}

// Open opens the registry, making its bucket when it is missing.
func Open(ctx context.Context, js jetstream.JetStream, replicas int) (*Registry, error) {
	if replicas <= 0 {
		replicas = 1
	}
	kv, err := js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: Bucket, Description: "sandfleet templates by name",
			MaxValueSize: MaxBytes, MaxBytes: int64(MaxTemplates) * MaxBytes * 2, History: 1, Replicas: replicas,
			Storage: jetstream.FileStorage})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("templates: bucket %s: %w", Bucket, err)
	}
	return &Registry{kv: kv}, nil
}

// Put registers t, an operator's template (a new one, or a new version of
// one), and returns it as stored, with its version. A tenant's goes
// through PutTenant.
func (r *Registry) Put(ctx context.Context, t Template) (*Template, error) {
	if t.Tenant != "" {
		return nil, invalid("tenant: an operator's template has none (a tenant's is PutTenant's)")
	}
	return r.put(ctx, t, nil)
}

// Get returns tenant's registration of name ("" tenant: the operator's),
// or ErrNotFound. A tenant's Get never reads the operator's nor another
// tenant's: the key is the tenant's.
func (r *Registry) Get(ctx context.Context, tenant, name string) (*Template, error) {
	if !ValidName(name) || tenant != "" && !fleet.ValidTenant(tenant) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	e, err := r.kv.Get(ctx, Key(tenant, name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	if err != nil {
		return nil, err
	}
	return decode(e)
}

// decode is the registration e holds, named by its key: a value that
// names another template than its key is not one.
func decode(e jetstream.KeyValueEntry) (*Template, error) {
	var t Template
	if err := json.Unmarshal(e.Value(), &t); err != nil {
		return nil, fmt.Errorf("templates: %s: %w", e.Key(), err)
	}
	tenant, name, ok := parseKey(e.Key())
	if !ok || t.Tenant != tenant || t.Name != name {
		return nil, fmt.Errorf("templates: key %s holds template %q of tenant %q", e.Key(), t.Name, t.Tenant)
	}
	t.Version = e.Revision()
	return &t, nil
}

// Delete removes tenant's registration of name ("" tenant: the operator's).
func (r *Registry) Delete(ctx context.Context, tenant, name string) error {
	if _, err := r.Get(ctx, tenant, name); err != nil {
		return err
	}
	return r.kv.Delete(ctx, Key(tenant, name))
}

// keys are the registry's keys, or those matching filters.
func (r *Registry) keys(ctx context.Context, filters ...string) ([]string, error) {
	var lister jetstream.KeyLister
	var err error
	if len(filters) == 0 {
		lister, err = r.kv.ListKeys(ctx)
	} else {
		lister, err = r.kv.ListKeysFiltered(ctx, filters...)
	}
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	return keys, nil
}

// List returns tenant's registrations ("" tenant: the operator's), by
// name.
func (r *Registry) List(ctx context.Context, tenant string) ([]*Template, error) {
	if tenant != "" && !fleet.ValidTenant(tenant) {
		return nil, nil
	}
	keys, err := r.keys(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, k := range keys {
		if t, n, ok := parseKey(k); ok && t == tenant {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var out []*Template
	for _, n := range names {
		t, err := r.Get(ctx, tenant, n)
		if errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// Watch calls set with every registration as it stands, at once and at
// each change (a deleted one is gone from the map), until ctx ends. The
// map is by key (Key): the operator's templates by name, the tenants'
// under their tenants' keys.
func (r *Registry) Watch(ctx context.Context, set func(map[string]*Template)) error {
	w, err := r.kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer w.Stop()
	all := map[string]*Template{}
	initial := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("templates: the watch ended")
			}
			if e == nil { // the initial values are in
				initial = false
				set(clone(all))
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				delete(all, e.Key())
			} else if t, err := decode(e); err == nil && t.Validate() == nil {
				all[e.Key()] = t
			}
			if !initial {
				set(clone(all))
			}
		}
	}
}

func clone(m map[string]*Template) map[string]*Template {
	out := make(map[string]*Template, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
