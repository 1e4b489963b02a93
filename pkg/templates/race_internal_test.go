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
