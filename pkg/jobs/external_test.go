package jobs_test

import (
	"errors"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/pkg/batch"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// TestOutsideProgram is what a program outside the module does with pkg/
// alone (this file imports nothing of internal/, which the test checks):
// it makes a fleet's client and a tenant's, queues a job with limits of
// its own, reads its phase, cancels it and reads the result, and makes a
// batch runner over the client.
func TestOutsideProgram(t *testing.T) {
	t.Parallel()
	checkImports(t, "external_test.go")
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("the NATS server did not start")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	client, err := jobs.NewClient(ctx, js, jobs.Config{CancelWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lim := limits.Default()
	lim.Timeout = limits.Duration(5 * time.Second)
	id, err := client.Submit(ctx, &jobs.Job{Image: "python", Code: "print(1)", Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := client.Phase(ctx, id); err != nil || p != jobs.PhaseQueued {
		t.Fatalf("phase of a job no worker took: %q, %v", p, err)
	}
	// No worker runs: the client stores the canceled result itself.
	res, err := client.Cancel(ctx, id)
	if err != nil || res.Status != jobs.StatusCanceled {
		t.Fatalf("cancel: %+v, %v", res, err)
	}
	if got, err := client.Get(ctx, id); err != nil || got.Status != jobs.StatusCanceled {
		t.Fatalf("get after cancel: %+v, %v", got, err)
	}
	if _, err := batch.New(client, batch.Config{Name: "nightly"}); err != nil {
		t.Fatalf("a batch runner over the client: %v", err)
	}

	tenant, err := jobs.NewTenantClient(js, "team-a", jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if q, err := tenant.QualifyID("job-1"); err != nil || q != "team-a.job-1" {
		t.Fatalf("a tenant's ID: %q, %v", q, err)
	}
	if _, err := tenant.Status(ctx); !errors.Is(err, jobs.ErrNotTenants) {
		t.Fatalf("a tenant's Status: %v, want ErrNotTenants", err)
	}
}

// checkImports fails t when file imports a package of the module's
// internal/: what it does, a program outside the module could not.
func checkImports(t *testing.T, file string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if strings.HasPrefix(path, "github.com/sandfleet/sandfleet/") && !strings.HasPrefix(path, "github.com/sandfleet/sandfleet/pkg/") {
			t.Errorf("%s imports %s: not the public API", file, path)
		}
	}
}
