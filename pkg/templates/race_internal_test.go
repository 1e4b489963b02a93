package templates

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
)

// interleavedKV runs between once after the first Get of a key that
// exists: what another request may do between a put's read and its write.
type interleavedKV struct {
	jetstream.KeyValue
	between func()
	// beforeCreate and afterCreate run once, around the first Create.
	beforeCreate, afterCreate func()
}

func (k *interleavedKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if f := k.beforeCreate; f != nil {
		k.beforeCreate = nil
		f()
	}
	rev, err := k.KeyValue.Create(ctx, key, value, opts...)
	if f := k.afterCreate; err == nil && f != nil {
		k.afterCreate = nil
		f()
	}
	return rev, err
}

func (k *interleavedKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := k.KeyValue.Get(ctx, key)
	if f := k.between; err == nil && f != nil {
		k.between = nil
		f()
	}
	return e, err
}

// A tenant at its cap PUTs a new version of a template it holds while it
// DELETEs that template and registers another: the new version, counted
// as taking no room when it was read, must not bring the deleted key
// back past the cap. Repeated over all its templates at once, it would
// grow the tenant's keys without bound, past the tenants' 128 and the
// registry's 256, refusing the operator's new templates.
func TestTenantCapUnderPutDeleteRace(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	ctx := t.Context()
	other, err := Open(ctx, js, 1) // the attacker's other requests
	if err != nil {
		t.Fatal(err)
	}
	reg, err := Open(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	pol := TenantPolicy{MaxTemplates: 2}
	tmpl := func(name string) Template {
		return Template{Name: name, Image: PresetImages[0], MainFile: "main.py", Argv: []string{"python3", "main.py"}}
	}
	for _, n := range []string{"a", "b"} {
		if _, err := other.PutTenant(ctx, "team-a", tmpl(n), pol); err != nil {
			t.Fatal(err)
		}
	}
	var betweenErr error
	reg.kv = &interleavedKV{KeyValue: reg.kv, between: func() {
		if err := other.Delete(ctx, "team-a", "a"); err != nil {
			betweenErr = err
			return
		}
		_, betweenErr = other.PutTenant(ctx, "team-a", tmpl("x"), pol)
	}}
	_, err = reg.PutTenant(ctx, "team-a", tmpl("a"), pol)
	if betweenErr != nil {
		t.Fatalf("the interleaved delete and put: %v", betweenErr)
	}
	if err != nil && !errors.Is(err, ErrFull) {
		t.Fatalf("the raced put: %v, want success or ErrFull", err)
	}
	keys, err := other.keys(ctx, tenantPrefix+"team-a.>")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > pol.MaxTemplates {
		t.Fatalf("team-a holds %d templates %v, past its cap of %d", len(keys), keys, pol.MaxTemplates)
	}
}

// Two new names counted at once, one under the cap: the put that finds
// itself over the cap once its key is made removes the key again, even
// when another request wrote a new version of it meanwhile, else a
// tenant that rewrites each new name as it is made keeps every one.
func TestTenantCapUnderCreateUpdateRace(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	ctx := t.Context()
	other, err := Open(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := Open(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	pol := TenantPolicy{MaxTemplates: 2}
	tmpl := func(name string) Template {
		return Template{Name: name, Image: PresetImages[0], MainFile: "main.py", Argv: []string{"python3", "main.py"}}
	}
	if _, err := other.PutTenant(ctx, "team-a", tmpl("a"), pol); err != nil {
		t.Fatal(err)
	}
	var errs []error
	reg.kv = &interleavedKV{KeyValue: reg.kv,
		// b was counted at 1 of 2; y takes the last room meanwhile.
		beforeCreate: func() {
			_, err := other.PutTenant(ctx, "team-a", tmpl("y"), pol)
			errs = append(errs, err)
		},
		// b is made, 3 of 2, and written over before it is counted.
		afterCreate: func() {
			_, err := other.PutTenant(ctx, "team-a", tmpl("b"), pol)
			errs = append(errs, err)
		}}
	if _, err := reg.PutTenant(ctx, "team-a", tmpl("b"), pol); !errors.Is(err, ErrFull) {
		t.Errorf("the put counted over the cap: %v, want ErrFull", err)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("the interleaved puts: %v", err)
	}
	keys, err := other.keys(ctx, tenantPrefix+"team-a.>")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > pol.MaxTemplates {
		t.Fatalf("team-a holds %d templates %v, past its cap of %d", len(keys), keys, pol.MaxTemplates)
	}
}
