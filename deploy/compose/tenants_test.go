package compose

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

var testTenantPasswords = map[string]string{"team-a": "tTenantA0", "team-b": "tTenantB0"}

// startTenantServer writes nats.conf with tenants.sh for team-a and team-b
// (into a copy: the committed file has no tenants) and starts a server
// from it, overriding only what startConfiguredServer does.
func startTenantServer(t *testing.T) *server.Server {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "nats.conf")
	data, err := os.ReadFile("nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", "tenants.sh", "--conf", conf, "team-a", "team-b").CombinedOutput()
	if err != nil {
		t.Fatalf("tenants.sh: %v\n%s", err, out)
	}
	return serveConf(t, conf, "tenants-test", map[string]string{
		"SANDFLEET_TENANT_TEAM_A_PASSWORD": testTenantPasswords["team-a"],
		"SANDFLEET_TENANT_TEAM_B_PASSWORD": testTenantPasswords["team-b"],
	})
}

// tenantConn connects as tenant t, as a tenant's client must: t's user,
// t's inbox prefix.
func tenantConn(t *testing.T, s *server.Server, tenant string) (*conn, *jobs.Client) {
	t.Helper()
	c := dial(t, s, append(jobs.TenantOptions(tenant), nats.UserInfo("tenant-"+tenant, testTenantPasswords[tenant]))...)
	client, err := jobs.NewTenantClient(c.js, tenant, jobs.Config{CancelWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c, client
}

// expectViolationMatching waits for a publish violation whose subject
// contains part.
func (c *conn) expectViolationMatching(t *testing.T, part string) {
	t.Helper()
	c.awaitViolation(t, "a publish to a subject with "+part, func(v string) bool {
		return strings.Contains(v, "Publish to") && strings.Contains(v, part)
	})
}

// expectSubViolation waits for the server to refuse this connection a
// subscription to subject.
func (c *conn) expectSubViolation(t *testing.T, subject string) {
	t.Helper()
	want := "Subscription to \"" + subject + "\""
	c.awaitViolation(t, "a subscription to "+subject, func(v string) bool { return strings.Contains(v, want) })
}

// TestTenants proves, on a server started from the nats.conf tenants.sh
// writes, that two tenants share a fleet without seeing each other: each
// submits, reads, watches and cancels its own jobs with its own
// credentials and both run on the same worker; tenant B cannot publish
// into A's queue, read, watch, cancel or list A's jobs and results, read
// the queue, or listen on A's inboxes and reply subjects, and a B job
// cannot reply into A's namespace. Every denial is the server's: the
// operation fails and a permissions violation names the subject.
func TestTenants(t *testing.T) {
	s := startTenantServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wrk := connect(t, s, "worker", testWorkerPassword)
	topo := fleet.Topology{AckWait: 5 * time.Second}
	exec := &fakeexec.Executor{}
	w := workertest.Start(t, wrk.js, exec, worker.Config{ID: "shared", Slots: 2, Topology: topo, FetchWait: 200 * time.Millisecond})
	testutil.Eventually(t, 30*time.Second, "the worker's topology", w.Ready) // a tenant may not create it
	a, clientA := tenantConn(t, s, "team-a")
	b, clientB := tenantConn(t, s, "team-b")

	// Both run, each with its own client, on the one worker.
	resA, err := clientA.SubmitAndWait(ctx, &jobs.Job{ID: "same", Image: "python", Code: "print a"})
	if err != nil || resA.Status != jobs.StatusSucceeded || resA.ID != "team-a.same" || resA.Stdout != "a\n" {
		t.Fatalf("tenant a: %v %+v", err, resA)
	}
	resB, err := clientB.SubmitAndWait(ctx, &jobs.Job{ID: "same", Image: "python", Code: "print b"})
	if err != nil || resB.Status != jobs.StatusSucceeded || resB.ID != "team-b.same" || resB.Stdout != "b\n" {
		t.Fatalf("tenant b, the same ID: %v %+v", err, resB)
	}
	if got, err := clientA.Get(ctx, "team-a.same"); err != nil || got.Stdout != "a\n" {
		t.Fatalf("tenant a reads its result: %v %+v", err, got)
	}
	if _, err := clientA.Submit(ctx, &jobs.Job{ID: "team-b.x", Image: "python", Code: "print x"}); !errors.Is(err, jobs.ErrInvalidJob) {
		t.Errorf("tenant a's client submitting as team-b: %v, want ErrInvalidJob", err)
	}
	// A job of a's, running, for b to try to cancel; a cancels it.
	idA, err := clientA.Submit(ctx, &jobs.Job{ID: "long", Image: "python", Code: "block"})
	if err != nil {
		t.Fatal(err)
	}
	for exec.Running() != 1 {
		select {
		case <-ctx.Done():
			t.Fatal("a's job not running")
		case <-time.After(10 * time.Millisecond): // polling, not synchronisation
		}
	}
	a.noViolation(t)
	b.noViolation(t)

	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 1500*time.Millisecond) }
	request := func(c *conn, subject string, body []byte) {
		t.Helper()
		cctx, done := short()
		defer done()
		if m, err := c.nc.RequestWithContext(cctx, subject, body); err == nil {
			t.Errorf("%s answered: %q", subject, m.Data)
		}
		c.expectViolation(t, subject)
	}

	t.Run("b cannot publish into a's queue", func(t *testing.T) {
		cctx, done := short()
		defer done()
		if _, err := b.js.Publish(cctx, fleet.Subject("default", "team-a.forged"), []byte(`{"image":"python","code":"print forged"}`)); err == nil {
			t.Fatal("b published a job as a")
		}
		b.expectViolation(t, "jobs.default.team-a.forged")
		cctx, done = short()
		defer done()
		if _, err := b.js.Publish(cctx, fleet.Subject("default", "untenanted"), []byte(`{"image":"python"}`)); err == nil {
			t.Fatal("b published a job of no tenant")
		}
		b.expectViolation(t, "jobs.default.untenanted")
	})

	t.Run("b cannot read a's result", func(t *testing.T) {
		cctx, done := short()
		defer done()
		if _, err := clientB.Get(cctx, "team-a.same"); err == nil {
			t.Fatal("b read a's result")
		}
		b.expectViolation(t, "$JS.API.DIRECT.GET.KV_RESULTS.$KV.RESULTS.team-a.same")
		request(b, "$JS.API.DIRECT.GET.KV_RESULTS", []byte(`{"last_by_subj":"$KV.RESULTS.team-a.same"}`))
		request(b, "$JS.API.STREAM.MSG.GET.KV_RESULTS", []byte(`{"last_by_subj":"$KV.RESULTS.team-a.same"}`))
	})

	t.Run("b cannot watch a's result", func(t *testing.T) {
		cctx, done := short()
		defer done()
		if rw, err := clientB.Watch(cctx, "team-a.long"); err == nil {
			rw.Stop()
			t.Fatal("b watches a's result")
		}
		b.expectViolationMatching(t, `.$KV.RESULTS.team-a.long"`)
		for _, filter := range []string{"$KV.RESULTS.>", "$KV.RESULTS.*.*"} {
			cctx, done := short()
			_, err := b.js.OrderedConsumer(cctx, "KV_RESULTS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
			done()
			if err == nil {
				t.Errorf("b watches %s", filter)
			}
		}
		cctx, done = short()
		defer done()
		if _, err := b.js.CreateConsumer(cctx, "KV_RESULTS", jetstream.ConsumerConfig{Name: "peek"}); err == nil {
			t.Error("b created a consumer on RESULTS without a filter")
		}
		b.expectViolation(t, "$JS.API.CONSUMER.CREATE.KV_RESULTS.peek")
	})

	t.Run("b cannot cancel a's job", func(t *testing.T) {
		cctx, done := short()
		defer done()
		if _, err := clientB.Cancel(cctx, idA); err == nil {
			t.Fatal("b canceled a's job")
		}
		b.expectViolationMatching(t, `"$JS.API.DIRECT.GET.KV_RESULTS.$KV.RESULTS.team-a.long"`)
		cctx, done = short()
		defer done()
		req, _ := json.Marshal(fleet.CancelRequest{RequestedAt: time.Now()})
		if _, err := b.js.Publish(cctx, "$KV.CANCELS."+idA, req); err == nil {
			t.Fatal("b stored a cancel request for a's job")
		}
		b.expectViolation(t, "$KV.CANCELS."+idA)
		if exec.Running() != 1 {
			t.Fatal("a's job stopped running")
		}
	})

	// A tenant's templates are registered by the gateway, on the
	// operator's connection: its own credentials reach no template, its
	// own keys no more than the operator's.
	t.Run("b cannot reach the template registry", func(t *testing.T) {
		for _, key := range []string{"_tenant.team-b.mine", "_tenant.team-a.t1", "t1"} {
			cctx, done := short()
			_, err := b.js.Publish(cctx, "$KV.TEMPLATES."+key, []byte(`{"name":"t1","image":"sandfleet/worker:latest","main_file":"m","argv":["x"]}`))
			done()
			if err == nil {
				t.Fatalf("b registered %s", key)
			}
			b.expectViolation(t, "$KV.TEMPLATES."+key)
			request(b, "$JS.API.DIRECT.GET.KV_TEMPLATES.$KV.TEMPLATES."+key, nil)
		}
		request(b, "$JS.API.STREAM.INFO.KV_TEMPLATES", nil)
	})

	t.Run("b cannot list jobs, results or consumers", func(t *testing.T) {
		for _, subj := range []string{
			"$JS.API.STREAM.NAMES",
			"$JS.API.STREAM.LIST",
			"$JS.API.STREAM.INFO.JOBS",       // a subjects_filter would list a's job IDs
			"$JS.API.STREAM.INFO.KV_RESULTS", // ... and result keys
			"$JS.API.STREAM.INFO.KV_CANCELS",
			"$JS.API.CONSUMER.LIST.JOBS",
			"$JS.API.CONSUMER.LIST.KV_RESULTS", // the names of a's watches
			"$JS.API.CONSUMER.NAMES.KV_RESULTS",
			"$JS.API.INFO",
		} {
			request(b, subj, []byte(`{"subjects_filter":"$KV.RESULTS.team-a.*"}`))
		}
	})

	t.Run("b cannot read the queue", func(t *testing.T) {
		for _, subj := range []string{
			"$JS.API.CONSUMER.MSG.NEXT.JOBS." + fleet.ConsumerName("default"),
			"$JS.API.STREAM.MSG.GET.JOBS",
			"$JS.API.DIRECT.GET.JOBS",
			"$JS.API.DIRECT.GET.JOBS.jobs.default.team-a.long",
			"$JS.API.CONSUMER.CREATE.JOBS.peek.jobs.*.team-a.*",
		} {
			request(b, subj, []byte(`{"batch":1}`))
		}
	})

	t.Run("b cannot listen on a's inboxes or reply subjects", func(t *testing.T) {
		for _, subj := range []string{"_INBOX.team-a.>", "results.team-a.>", "_INBOX.>", ">"} {
			sub, err := b.nc.SubscribeSync(subj)
			if err != nil {
				t.Fatal(err)
			}
			b.expectSubViolation(t, subj)
			sub.Unsubscribe()
		}
	})

	t.Run("a job of b's cannot reply into a's namespace", func(t *testing.T) {
		res, err := clientB.SubmitAndWait(ctx, &jobs.Job{ID: "spoof", Image: "python", Code: "print spoof", ReplyTo: "results.team-a.inbox"})
		if !errors.Is(err, jobs.ErrInvalidJob) || res != nil {
			t.Fatalf("b's client sent a job replying to a: %v %+v", err, res)
		}
		// A bare publish skips the client's checks; the worker's stop it.
		sub, err := a.nc.SubscribeSync("results.team-a.inbox")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if _, err := b.js.Publish(ctx, fleet.Subject("default", "team-b.spoof"),
			[]byte(`{"image":"python","code":"print spoof","reply_to":"results.team-a.inbox"}`)); err != nil {
			t.Fatal(err)
		}
		res, err = clientB.Wait(ctx, "team-b.spoof")
		if err != nil || res.Status != jobs.StatusRejected || !strings.Contains(res.Error, "tenant team-b replies only on") {
			t.Fatalf("b's job replying to a: %v %+v, want rejected", err, res)
		}
		if m, err := sub.NextMsg(500 * time.Millisecond); err == nil {
			t.Fatalf("a received b's result: %s", m.Data)
		}
	})

	// a's job ran on untouched; a cancels it itself.
	res, err := clientA.Cancel(ctx, idA)
	if err != nil || res.Status != jobs.StatusCanceled || res.ID != idA {
		t.Fatalf("a cancels its job: %v %+v", err, res)
	}
	if n := exec.Runs("team-a.long"); n != 1 {
		t.Errorf("a's job ran %d times", n)
	}
	a.noViolation(t)
	wrk.noViolation(t)
}
