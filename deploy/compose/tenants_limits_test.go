package compose

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// tenantFleet starts a server from the nats.conf tenants.sh writes, a
// worker serving every tenant, the operator's client and both tenants'.
type tenantFleet struct {
	s                *server.Server
	a, b             *conn
	clientA, clientB *jobs.Client
	op               *jobs.Client
	wrk              *conn
}

func startTenantFleet(t *testing.T, ctx context.Context) *tenantFleet {
	t.Helper()
	s := startTenantServer(t)
	f := &tenantFleet{s: s, wrk: connect(t, s, "worker", testWorkerPassword)}
	w := workertest.Start(t, f.wrk.js, &fakeexec.Executor{}, worker.Config{ID: "shared", Slots: 4,
		Topology: fleet.Topology{AckWait: 5 * time.Second}, FetchWait: 200 * time.Millisecond})
	testutil.Eventually(t, 30*time.Second, "the worker's topology", w.Ready)
	sub := connect(t, s, "submitter", testSubmitterPassword)
	var err error
	if f.op, err = jobs.NewClient(ctx, sub.js, jobs.Config{}); err != nil {
		t.Fatal(err)
	}
	f.a, f.clientA = tenantConn(t, s, "team-a")
	f.b, f.clientB = tenantConn(t, s, "team-b")
	return f
}

// runAndFollow runs a job with client, waiting for its result, another
// with a batch's watch of results, and follows a third to its end, each
// within a deadline a stopped fleet would miss.
func runAndFollow(t *testing.T, ctx context.Context, who string, client *jobs.Client, id string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	res, err := client.SubmitAndWait(wctx, &jobs.Job{ID: id + "-wait", Image: "python", Code: "print " + who})
	if err != nil || res.Status != jobs.StatusSucceeded || res.Stdout != who+"\n" {
		t.Fatalf("%s: SubmitAndWait: %v %+v", who, err, res)
	}
	// A batch's watch of many results.
	bid, err := client.QualifyID(id + "-batch")
	if err != nil {
		t.Fatal(err)
	}
	rw, err := client.WatchResults(wctx, bid)
	if err != nil {
		t.Fatalf("%s: WatchResults: %v", who, err)
	}
	defer rw.Stop()
	if _, err := client.Submit(wctx, &jobs.Job{ID: bid, Image: "python", Code: "print " + who}); err != nil {
		t.Fatal(err)
	}
	if got, err := rw.Next(wctx); err != nil || got.ID != bid {
		t.Fatalf("%s: WatchResults: %q, %v", who, got.ID, err)
	}
	qid, err := client.Submit(wctx, &jobs.Job{ID: id + "-follow", Image: "python", Code: "print " + who})
	if err != nil {
		t.Fatal(err)
	}
	var out string
	var final *jobs.Result
	for ev, err := range client.Follow(wctx, qid) {
		if err != nil {
			t.Fatalf("%s: Follow: %v", who, err)
		}
		if ev.Type == jobs.EventOutput {
			out += string(ev.DataBytes())
		}
		final = ev.Result
	}
	if out != who+"\n" || final == nil || final.Status != jobs.StatusSucceeded {
		t.Fatalf("%s: followed output %q, result %+v", who, out, final)
	}
}

// TestTenantConsumerCap proves that no tenant can use up the consumers
// other tenants and the operator need. b creates durable consumers, as
// many as the server takes, on every stream its permissions let it name
// a consumer on (its own keys of RESULTS, its jobs' events in EVENTS and
// in the stream of its own): on RESULTS and EVENTS it may create none, on
// its own stream no more than Topology.TenantMaxConsumers. Then a, the
// operator (for a's job and one of no tenant) still wait for results and
// follow jobs; b still waits for results, and only its own follows are
// refused.
func TestTenantConsumerCap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := startTenantFleet(t, ctx)
	// b's stream is made for b's first job.
	runAndFollow(t, ctx, "b", f.clientB, "first")

	cap := (fleet.Topology{}).WithDefaults().TenantMaxConsumers
	for _, c := range []struct {
		stream, filter string
		max            int // the most b may create
	}{
		{"KV_" + fleet.ResultsBucket, "$KV.RESULTS.team-b.*", 0},
		{fleet.EventsStreamName, "events.team-b.*", 0},
		{fleet.EventsStreamOf("team-b"), "events.team-b.*", cap},
	} {
		made := 0
		for ; made <= 1100; made++ { // until refused: the server caps a stream at 1,000 by default
			cctx, done := context.WithTimeout(ctx, 2*time.Second)
			_, err := f.b.js.CreateOrUpdateConsumer(cctx, c.stream, jetstream.ConsumerConfig{
				Durable: fmt.Sprintf("hog-%d", made), FilterSubject: c.filter, AckPolicy: jetstream.AckNonePolicy,
			})
			done()
			if err != nil {
				t.Logf("%s: b made %d consumers, then: %v", c.stream, made, err)
				break
			}
		}
		if made > c.max {
			t.Errorf("%s: b made %d consumers, want at most %d", c.stream, made, c.max)
		}
		if c.max == 0 {
			f.b.expectViolationMatching(t, "$JS.API.CONSUMER.CREATE."+c.stream+".hog-0.")
		}
	}

	runAndFollow(t, ctx, "a", f.clientA, "after")
	runAndFollow(t, ctx, "op", f.op, "after")
	runAndFollow(t, ctx, "op", f.op, "team-a.op-after")
	// b spent only its own: its results still come (no consumer), and its
	// follows wait for its durables to expire.
	if res, err := f.clientB.SubmitAndWait(ctx, &jobs.Job{ID: "after", Image: "python", Code: "print b"}); err != nil || res.Status != jobs.StatusSucceeded {
		t.Fatalf("b: SubmitAndWait: %v %+v", err, res)
	}
	var last error
	for _, err := range f.clientB.Follow(ctx, "team-b.after") {
		last = err
	}
	if last == nil || !strings.Contains(last.Error(), "maximum consumers") {
		t.Fatalf("b follows past its cap: %v", last)
	}
	f.a.noViolation(t)
	f.wrk.noViolation(t)
}

// floodAPI has c publish JetStream API requests (consumer creates, which
// the server queues for its API workers, no reply wanted) as fast as it
// can until ctx ends; it returns how many it published.
func floodAPI(ctx context.Context, c *conn, subject func(i int) string, body func(i int) []byte) int {
	n := 0
	for ctx.Err() == nil {
		for range 1000 {
			if c.nc.Publish(subject(n), body(n)) != nil {
				return n
			}
			n++
		}
		if c.nc.FlushWithContext(ctx) != nil {
			return n
		}
	}
	return n
}

// waits has client run n jobs one after another, each waited for with
// SubmitAndWait, and returns how long each took; it fails t if one does
// not finish within limit.
func waits(t *testing.T, ctx context.Context, client *jobs.Client, prefix string, n int, limit time.Duration) []time.Duration {
	t.Helper()
	took := make([]time.Duration, 0, n)
	for i := range n {
		wctx, cancel := context.WithTimeout(ctx, limit)
		start := time.Now()
		res, err := client.SubmitAndWait(wctx, &jobs.Job{ID: fmt.Sprintf("%s-%d", prefix, i), Image: "python", Code: "print x"})
		cancel()
		if err != nil || res.Status != jobs.StatusSucceeded {
			t.Fatalf("wait %d of %d: %v %+v (after %v)", i+1, n, err, res, time.Since(start).Round(time.Millisecond))
		}
		took = append(took, time.Since(start))
	}
	return took
}

// quantile returns the q-quantile of ds (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// TestTenantAPIFlood proves that one tenant's flood of JetStream API
// requests does not stop another tenant's result waits: while b publishes
// consumer-create requests as fast as it can (the server's one API queue
// fills and is dropped, over and over), a's and the operator's
// SubmitAndWait calls all finish within a deadline. It logs the
// result-wait p50 and p99 with and without the flood (docs/operations.md's
// tenants section quotes them: run it with -v).
func TestTenantAPIFlood(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := startTenantFleet(t, ctx)
	const n = 200
	limit := 15 * time.Second // an API request the server drops times out at 5 s
	quiet := waits(t, ctx, f.clientA, "quiet", n, limit)
	quietOp := waits(t, ctx, f.op, "quiet", n, limit)

	fctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var sent int
	wg.Add(1)
	go func() {
		defer wg.Done()
		// On KV_WORKSPACES, b's keys: a consumer b may create whatever
		// else it may, so the flood is the same against any topology.
		sent = floodAPI(fctx, f.b,
			func(i int) string {
				return fmt.Sprintf("$JS.API.CONSUMER.CREATE.KV_WORKSPACES.flood-%d.$KV.WORKSPACES.team-b.*", i)
			},
			func(i int) []byte {
				return fmt.Appendf(nil, `{"stream_name":"KV_WORKSPACES","config":{"name":"flood-%d","filter_subject":"$KV.WORKSPACES.team-b.*","ack_policy":"none","mem_storage":true,"inactive_threshold":2000000000}}`, i)
			})
	}()
	// The flood is on before a waits: requests wait in the server's API
	// queue (which it drops whole at 10,000), and the most that waited at
	// once while a waited is reported.
	queued := func() uint64 {
		info, err := f.s.Jsz(nil)
		if err != nil {
			return 0
		}
		return info.API.Inflight
	}
	testutil.Eventually(t, 2*time.Minute, "b's flood to back the API queue up", func() bool { return queued() >= 2000 })
	var peak uint64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for fctx.Err() == nil {
			peak = max(peak, queued())
			select {
			case <-fctx.Done():
			case <-time.After(5 * time.Millisecond): // sampling, not synchronisation
			}
		}
	}()
	flooded := waits(t, ctx, f.clientA, "flooded", n, limit)
	floodedOp := waits(t, ctx, f.op, "flooded", n, limit)
	stop()
	wg.Wait()
	<-sampled

	var b strings.Builder
	fmt.Fprintf(&b, "result wait over %d sequential SubmitAndWait each (fake executor); b sent %d requests, up to %d in the API queue at once:\n", n, sent, peak)
	row := func(what string, ds []time.Duration) {
		r := func(q float64) time.Duration { return quantile(ds, q).Round(10 * time.Microsecond) }
		fmt.Fprintf(&b, "  %-24s p50 %8v  p99 %8v  max %8v\n", what, r(.5), r(.99), r(1))
	}
	row("a, quiet", quiet)
	row("a, b flooding", flooded)
	row("operator, quiet", quietOp)
	row("operator, b flooding", floodedOp)
	t.Log(b.String())
	f.a.noViolation(t)
}
