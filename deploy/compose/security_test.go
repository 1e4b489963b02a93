package compose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// Test passwords: letters and digits, like secrets.sh makes.
const (
	testSubmitterPassword = "sTestSubmitter0"
	testWorkerPassword    = "wTestWorker0"
	testRoutePassword     = "rTestRoute0"
)

// startConfiguredServer starts an in-process nats-server from nats.conf, the
// file the compose nodes run.
func startConfiguredServer(t *testing.T) *server.Server {
	t.Helper()
	return serveConf(t, "nats.conf", "security-test", nil)
}

// serveConf starts an in-process nats-server from conf, with the test
// passwords and env in its environment, and only what a test must change
// overridden: a free port, a temporary store, no monitoring port and no
// cluster.
func serveConf(t *testing.T, conf, name string, env map[string]string) *server.Server {
	t.Helper()
	if testing.Short() {
		// Each role's denials wait out a timeout, one after another (the
		// server's config is read from the environment, so these tests
		// cannot run in parallel): minutes, too long for make check.
		t.Skip("checks nats.conf's roles on a configured server; skipped under -short")
	}
	t.Setenv("NATS_SERVER_NAME", name)
	t.Setenv("NATS_ROUTE_PASSWORD", testRoutePassword)
	t.Setenv("SANDFLEET_SUBMITTER_PASSWORD", testSubmitterPassword)
	t.Setenv("SANDFLEET_WORKER_PASSWORD", testWorkerPassword)
	for k, v := range env {
		t.Setenv(k, v)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("%s: %v", conf, err)
	}
	opts.Host, opts.Port = "127.0.0.1", -1
	opts.HTTPPort = 0
	opts.Cluster = server.ClusterOpts{}
	opts.Routes = nil
	opts.StoreDir = t.TempDir()
	return natstest.ServerWith(t, opts)
}

// conn is one role's connection, with the permission violations the server
// reported to it.
type conn struct {
	nc         *nats.Conn
	js         jetstream.JetStream
	violations chan error
}

// connect connects to s as user.
func connect(t *testing.T, s *server.Server, user, password string) *conn {
	t.Helper()
	return dial(t, s, nats.UserInfo(user, password), nats.Name(user))
}

// dial connects to s with opts, keeping the permission violations the
// server reports.
func dial(t *testing.T, s *server.Server, opts ...nats.Option) *conn {
	t.Helper()
	c := &conn{violations: make(chan error, 64)}
	c.nc, c.js = natstest.Connect(t, s.ClientURL(), append(opts,
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				select {
				case c.violations <- err:
				default:
				}
			}
		}))...)
	return c
}

// roles starts a server from nats.conf and connects a worker and a
// submitter; the worker ensures topo, as cmd/worker does at start.
func roles(t *testing.T, ctx context.Context, topo fleet.Topology) (wrk, sub *conn) {
	t.Helper()
	s := startConfiguredServer(t)
	wrk = connect(t, s, "worker", testWorkerPassword)
	sub = connect(t, s, "submitter", testSubmitterPassword)
	if _, err := topo.Ensure(ctx, wrk.js); err != nil {
		t.Fatalf("worker: ensure topology: %v", err)
	}
	return wrk, sub
}

// awaitViolation waits for the server to report a permissions violation of
// this connection whose text match accepts, and fails t, naming what, when
// none came within 5 s.
func (c *conn) awaitViolation(t *testing.T, what string, match func(violation string) bool) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case err := <-c.violations:
			if match(err.Error()) {
				return
			}
			t.Logf("other violation: %v", err)
		case <-deadline:
			t.Fatalf("no permissions violation for %s", what)
		}
	}
}

// expectViolation waits for the server to report that this connection was
// refused publishing to subject. A denied request gets no reply at all (the
// caller only sees a timeout), so the violation is the proof that the
// permissions, and nothing else, refused it.
func (c *conn) expectViolation(t *testing.T, subject string) {
	t.Helper()
	want := fmt.Sprintf("Publish to %q", subject)
	c.awaitViolation(t, "publish to "+subject, func(v string) bool { return strings.Contains(v, want) })
}

// noViolation fails if the server refused this connection anything so far.
func (c *conn) noViolation(t *testing.T) {
	t.Helper()
	select {
	case err := <-c.violations:
		t.Fatalf("unexpected permissions violation: %v", err)
	default:
	}
}

// TestSecurityModel proves the roles of nats.conf on a real server: a
// submitter can submit a job and read its result but cannot pull the job,
// create a consumer on JOBS, forge a result or a heartbeat, or change the
// topology; a worker can do what a worker does. Every denial is checked
// twice: the operation fails and the server reports a permissions violation
// for the exact subject. Remove a permission rule and a subtest fails.
func TestSecurityModel(t *testing.T) {
	s := startConfiguredServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	wrk := connect(t, s, "worker", testWorkerPassword)
	sub := connect(t, s, "submitter", testSubmitterPassword)

	// The worker owns the topology, as cmd/worker does at start.
	topo := fleet.Topology{AckWait: 5 * time.Second}
	stores, err := topo.Ensure(ctx, wrk.js)
	if err != nil {
		t.Fatalf("worker: ensure topology: %v", err)
	}
	if _, err := topo.EnsureConsumer(ctx, wrk.js, "default"); err != nil {
		t.Fatalf("worker: ensure consumer: %v", err)
	}
	wrk.noViolation(t)

	// Wrong credentials are refused outright.
	if nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("submitter", testWorkerPassword)); err == nil {
		nc.Close()
		t.Fatal("connected with a wrong password")
	}
	if nc, err := nats.Connect(s.ClientURL()); err == nil {
		nc.Close()
		t.Fatal("connected without credentials")
	}

	// The submitter's client opens the topology the worker made: with the
	// submitter's credentials it could not create or change it.
	client, err := jobs.NewClient(ctx, sub.js, jobs.Config{})
	if err != nil {
		t.Fatalf("submitter: open client: %v", err)
	}
	const id = "security-1"
	waited := make(chan *jobs.Result, 1)
	waitErr := make(chan error, 1)
	go func() {
		r, err := client.Wait(ctx, id)
		waited <- r
		waitErr <- err
	}()
	if _, err := client.Submit(ctx, &jobs.Job{ID: id, Image: "python", Code: "print(6*7)"}); err != nil {
		t.Fatalf("submitter: submit: %v", err)
	}
	sub.noViolation(t)

	short := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, 1500*time.Millisecond)
	}
	consumer := fleet.ConsumerName("default")

	t.Run("submitter cannot pull a job", func(t *testing.T) {
		// Consumer info is allowed (status shows jobs in flight) ...
		c, err := sub.js.Consumer(ctx, fleet.StreamName, consumer)
		if err != nil {
			t.Fatalf("consumer info: %v", err)
		}
		// ... but the pull request is refused.
		batch, err := c.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err == nil {
			for m := range batch.Messages() {
				t.Fatalf("submitter pulled %s", m.Subject())
			}
		}
		sub.expectViolation(t, "$JS.API.CONSUMER.MSG.NEXT.JOBS."+consumer)
	})

	t.Run("submitter cannot create a consumer on JOBS", func(t *testing.T) {
		cctx, done := short()
		defer done()
		_, err := sub.js.CreateConsumer(cctx, fleet.StreamName, jetstream.ConsumerConfig{
			Durable: "thief", AckPolicy: jetstream.AckExplicitPolicy,
		})
		if err == nil {
			t.Fatal("submitter created a durable consumer on JOBS")
		}
		sub.expectViolation(t, "$JS.API.CONSUMER.CREATE.JOBS.thief")
		oc, err := sub.js.OrderedConsumer(cctx, fleet.StreamName, jetstream.OrderedConsumerConfig{})
		if err == nil {
			if _, err = oc.Fetch(1, jetstream.FetchMaxWait(time.Second)); err == nil {
				t.Fatal("submitter read JOBS through an ordered consumer")
			}
		}
		if _, err := wrk.js.Consumer(ctx, fleet.StreamName, "thief"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Fatalf("consumer thief: want ErrConsumerNotFound, got %v", err)
		}
	})

	t.Run("submitter cannot forge a result", func(t *testing.T) {
		forged, _ := json.Marshal(jobs.Result{ID: id, Status: jobs.StatusSucceeded, Stdout: "forged"})
		cctx, done := short()
		defer done()
		if _, err := natstest.Stores(t, sub.js).Results.Create(cctx, id, forged); err == nil {
			t.Fatal("submitter created a result")
		}
		sub.expectViolation(t, "$KV.RESULTS."+id)
		cctx, done = short()
		defer done()
		if _, err := natstest.Stores(t, sub.js).Results.Put(cctx, id, forged); err == nil {
			t.Fatal("submitter put a result")
		}
		sub.expectViolation(t, "$KV.RESULTS."+id)
		if _, err := stores.Results.Get(ctx, id); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("RESULTS[%s] after the forgery: want ErrKeyNotFound, got %v", id, err)
		}
	})

	t.Run("submitter cannot write WORKERS", func(t *testing.T) {
		kv, err := sub.js.KeyValue(ctx, fleet.WorkersBucket)
		if err != nil {
			t.Fatalf("bind WORKERS (reading heartbeats is allowed): %v", err)
		}
		cctx, done := short()
		defer done()
		if _, err := kv.Put(cctx, "fake-worker", []byte(`{}`)); err == nil {
			t.Fatal("submitter wrote a heartbeat")
		}
		sub.expectViolation(t, "$KV.WORKERS.fake-worker")
	})

	t.Run("submitter cannot change the topology", func(t *testing.T) {
		for _, tc := range []struct {
			subject string
			op      func(context.Context) error
		}{
			{"$JS.API.STREAM.UPDATE.KV_RESULTS", func(ctx context.Context) error {
				_, err := sub.js.UpdateStream(ctx, jetstream.StreamConfig{
					Name: "KV_RESULTS", Subjects: []string{"$KV.RESULTS.>", "forge.>"},
				})
				return err
			}},
			{"$JS.API.STREAM.PURGE.JOBS", func(ctx context.Context) error {
				st, err := sub.js.Stream(ctx, fleet.StreamName)
				if err != nil {
					return fmt.Errorf("stream info is allowed: %w", err)
				}
				return st.Purge(ctx)
			}},
			{"$JS.API.STREAM.DELETE.JOBS", func(ctx context.Context) error {
				return sub.js.DeleteStream(ctx, fleet.StreamName)
			}},
		} {
			cctx, done := short()
			if err := tc.op(cctx); err == nil {
				t.Errorf("%s: allowed", tc.subject)
			}
			done()
			sub.expectViolation(t, tc.subject)
		}
	})

	t.Run("submitter cannot answer on an inbox", func(t *testing.T) {
		if err := sub.nc.Publish("_INBOX.someone", []byte("spoofed")); err != nil {
			t.Fatal(err)
		}
		sub.expectViolation(t, "_INBOX.someone")
	})

	t.Run("worker cannot submit", func(t *testing.T) {
		cctx, done := short()
		defer done()
		if _, err := wrk.js.Publish(cctx, fleet.Subject("default", "from-worker"), []byte(`{}`)); err == nil {
			t.Fatal("worker published a job")
		}
		wrk.expectViolation(t, fleet.Subject("default", "from-worker"))
	})

	t.Run("worker cannot purge or delete the fleet's streams", func(t *testing.T) {
		// Workers may create, update and purge streams by any name (the
		// tenants' object stores are named on first use); the denies keep
		// these out.
		for _, subj := range []string{
			"$JS.API.STREAM.PURGE.JOBS",
			"$JS.API.STREAM.PURGE.KV_RESULTS",
			"$JS.API.STREAM.PURGE.EVENTS",
			"$JS.API.STREAM.DELETE.KV_RESULTS",
			"$JS.API.STREAM.DELETE.OBJ_SNAPSHOTS",
		} {
			cctx, done := short()
			if m, err := wrk.nc.RequestWithContext(cctx, subj, []byte(`{}`)); err == nil {
				t.Errorf("%s answered: %s", subj, m.Data)
			}
			done()
			wrk.expectViolation(t, subj)
		}
	})

	// After all that the job is untouched: queued, not in flight, no result.
	info, err := stores.Stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("JOBS holds %d messages, want the 1 job", info.State.Msgs)
	}

	t.Run("worker pulls the job and stores its result", func(t *testing.T) {
		c, err := wrk.js.Consumer(ctx, fleet.StreamName, consumer)
		if err != nil {
			t.Fatal(err)
		}
		batch, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatalf("worker fetch: %v", err)
		}
		var msg jetstream.Msg
		for m := range batch.Messages() {
			msg = m
		}
		if msg == nil {
			t.Fatalf("worker fetched nothing: %v", batch.Error())
		}
		job, err := jobs.Decode(msg.Data(), 0)
		if err != nil || job.ID != id {
			t.Fatalf("worker fetched %s (%v), want job %s", msg.Subject(), err, id)
		}
		if err := msg.InProgress(); err != nil {
			t.Fatalf("in progress: %v", err)
		}
		stored, won, err := records.StoreResult(ctx, stores.Results,
			&jobs.Result{ID: id, Status: jobs.StatusSucceeded, Stdout: "42\n", Worker: "w1"}, stores.MaxResultBytes)
		if err != nil || !won {
			t.Fatalf("worker store result: won=%v err=%v", won, err)
		}
		if stored.Stdout != "42\n" {
			t.Fatalf("stored %+v", stored)
		}
		if err := msg.DoubleAck(ctx); err != nil {
			t.Fatalf("ack: %v", err)
		}
		if _, err := stores.Workers.Put(ctx, "w1", []byte(`{"id":"w1"}`)); err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
		wrk.noViolation(t)
	})

	t.Run("submitter reads the result", func(t *testing.T) {
		if err := <-waitErr; err != nil {
			t.Fatalf("wait: %v", err)
		}
		r := <-waited
		if r.ID != id || r.Status != jobs.StatusSucceeded || r.Stdout != "42\n" {
			t.Fatalf("waited for %+v", r)
		}
		got, err := client.Get(ctx, id)
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if got.Stdout != "42\n" || got.Worker != "w1" {
			t.Fatalf("got %+v", got)
		}
	})

	t.Run("submitter reads the fleet status", func(t *testing.T) {
		st, err := client.Status(ctx)
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		if len(st.Queues) != 1 || st.Queues[0].Queue != "default" || st.Messages != 0 {
			t.Fatalf("status %+v, want queue default and an empty stream", st)
		}
		sub.noViolation(t)
	})
}

// TestSubmitterCancel proves that cancel works with a submitter's
// credentials, which may not write RESULTS. With no worker up, Cancel of a
// queued job records the request and reports ErrCancelPending (its own
// write of the result is refused); the worker that later takes the job
// finishes it as canceled without running it. With a worker up, Cancel of
// a job queued behind a busy slot returns the canceled result the worker
// stores at once, and the submitter is refused nothing.
func TestSubmitterCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topo := fleet.Topology{AckWait: 5 * time.Second, CancelWait: 500 * time.Millisecond}
	wrk, sub := roles(t, ctx, topo)
	client, err := jobs.NewClient(ctx, sub.js, jobs.Config{CancelWait: topo.CancelWait})
	if err != nil {
		t.Fatalf("submitter: open client: %v", err)
	}
	exec := &fakeexec.Executor{}

	if _, err := client.Submit(ctx, &jobs.Job{ID: "cancel-early", Image: "python", Code: "print never"}); err != nil {
		t.Fatal(err)
	}
	res, err := client.Cancel(ctx, "cancel-early")
	if !errors.Is(err, jobs.ErrCancelPending) {
		t.Fatalf("cancel with no worker up: %+v, %v; want ErrCancelPending", res, err)
	}
	sub.expectViolation(t, "$KV.RESULTS.cancel-early")

	workertest.Start(t, wrk.js, exec, worker.Config{ID: "w-sec", Slots: 1, Topology: topo, FetchWait: 200 * time.Millisecond})

	res, err = client.Wait(ctx, "cancel-early")
	if err != nil || res.Status != jobs.StatusCanceled || res.Worker != "w-sec" {
		t.Fatalf("job canceled before a worker was up: %v %+v", err, res)
	}

	if _, err := client.Submit(ctx, &jobs.Job{ID: "busy", Image: "python", Code: "block"}); err != nil {
		t.Fatal(err)
	}
	for exec.Running() != 1 {
		select {
		case <-ctx.Done():
			t.Fatal("busy job not running")
		case <-time.After(10 * time.Millisecond): // polling, not synchronisation
		}
	}
	if _, err := client.Submit(ctx, &jobs.Job{ID: "behind", Image: "python", Code: "print never"}); err != nil {
		t.Fatal(err)
	}
	res, err = client.Cancel(ctx, "behind")
	if err != nil || res.Status != jobs.StatusCanceled || res.Worker != "w-sec" {
		t.Fatalf("cancel of a job queued behind a busy worker: %v %+v", err, res)
	}
	if res, err = client.Cancel(ctx, "busy"); err != nil || res.Status != jobs.StatusCanceled {
		t.Fatalf("cancel of the running job: %v %+v", err, res)
	}
	if n := exec.Runs("cancel-early") + exec.Runs("behind"); n != 0 {
		t.Errorf("canceled queued jobs ran %d times", n)
	}
	sub.noViolation(t)
	wrk.noViolation(t)
}
