package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

var _ worker.Executor = (*fakeexec.Executor)(nil)
var _ worker.Pinger = (*fakeexec.Executor)(nil)

type bundle struct {
	url    string
	nc     *nats.Conn
	js     jetstream.JetStream
	client *jobs.Client
	exec   *fakeexec.Executor
	topo   fleet.Topology
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupWith(t, fleet.Topology{AckWait: 2 * time.Second, MaxJobBytes: 64 << 10})
}

// setupWith starts an in-process server and opens topo on it.
func setupWith(t *testing.T, topo fleet.Topology) *bundle {
	t.Helper()
	srv := natstest.Server(t)
	nc, js := natstest.Connect(t, srv.ClientURL())
	client := openClient(t, js, topo)
	return &bundle{url: srv.ClientURL(), nc: nc, js: js, client: client, exec: &fakeexec.Executor{}, topo: topo}
}

// openClient opens topo on js, creating what is missing with its settings
// as the workers would, and returns a client with its cap on a job's size
// and its CancelWait.
func openClient(t *testing.T, js jetstream.JetStream, topo fleet.Topology) *jobs.Client {
	t.Helper()
	if _, err := topo.Open(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	client, err := jobs.NewClient(t.Context(), js, clientConfig(topo))
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// clientConfig is the part of topo a client takes.
func clientConfig(topo fleet.Topology) jobs.Config {
	return jobs.Config{MaxJobBytes: topo.MaxJobBytes, CancelWait: topo.CancelWait}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func fastBackoff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 20 * time.Millisecond
	b.MaxInterval = 100 * time.Millisecond
	b.MaxElapsedTime = 0
	return b
}

// running is a worker started by startWorker.
type running struct {
	w            *worker.Worker
	stop, force  context.CancelFunc
	done         chan error
	stopOnce     sync.Once
	stoppedError error
}

// Stop drains the worker and waits for Run to return.
func (r *running) Stop(t *testing.T) {
	t.Helper()
	r.stopOnce.Do(func() {
		r.stop()
		select {
		case r.stoppedError = <-r.done:
		case <-time.After(30 * time.Second):
			t.Fatal("worker did not drain within 30s")
		}
	})
	if r.stoppedError != nil {
		t.Fatalf("worker Run: %v", r.stoppedError)
	}
}

func (b *bundle) startWorker(t *testing.T, cfg worker.Config) *running {
	t.Helper()
	return b.startWorkerOn(t, b.exec, cfg)
}

// startWorkerOn is startWorker with an executor of the test's.
func (b *bundle) startWorkerOn(t *testing.T, exec worker.Executor, cfg worker.Config) *running {
	t.Helper()
	if cfg.ID == "" {
		cfg.ID = "w1"
	}
	cfg.Topology = b.topo
	if cfg.FetchWait == 0 {
		cfg.FetchWait = 200 * time.Millisecond
	}
	if cfg.Slots == 0 {
		cfg.Slots = 2
	}
	cfg.Backoff = fastBackoff
	cfg.NakDelay = 100 * time.Millisecond
	cfg.Logger = quietLogger()
	if testing.Verbose() {
		cfg.Logger = slog.Default()
	}
	w, err := worker.New(b.js, exec, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopCtx, stop := context.WithCancel(context.Background())
	forceCtx, force := context.WithCancel(context.Background())
	r := &running{w: w, stop: stop, force: force, done: make(chan error, 1)}
	go func() { r.done <- w.Run(stopCtx, forceCtx) }()
	t.Cleanup(func() { r.force(); r.Stop(t) })
	return r
}

// ackSpy watches the workers' pulls for deliveries of job id: acks returns
// their ack subjects so far (a "-NAK" published to one is what the end of
// its lease would do); spy is the connection it listens on.
func (b *bundle) ackSpy(t *testing.T, id string) (spy *nats.Conn, acks func() []string) {
	t.Helper()
	spy, _ = natstest.Connect(t, b.url)
	var mu sync.Mutex
	var subjects []string
	sub, err := spy.Subscribe("_INBOX.>", func(m *nats.Msg) {
		if strings.HasPrefix(m.Reply, "$JS.ACK.") && strings.Contains(string(m.Data), `"`+id+`"`) {
			mu.Lock()
			subjects = append(subjects, m.Reply)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	return spy, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(subjects)
	}
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Output within the caps can still encode to more than the server takes
// ('<' is six bytes in JSON): the stored result is shortened to fit and
// marked truncated, instead of the job failing to store and running again
// until its deliveries run out.
func TestOversizedResultIsTruncatedNotRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{})
	// Two MiB of output go out as events before the result: slow under -race
	// on a loaded machine, hence a longer wait than waitCtx's.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res, err := b.client.SubmitAndWait(ctx, &jobs.Job{ID: "angle-brackets", Image: "python", Code: "flood 1048576 <"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != jobs.StatusSucceeded || res.Attempt != 1 || b.exec.Runs("angle-brackets") != 1 {
		t.Fatalf("status %s attempt %d runs %d, want succeeded once", res.Status, res.Attempt, b.exec.Runs("angle-brackets"))
	}
	if !res.StdoutTruncated || !res.StderrTruncated || len(res.Stdout) == 0 || len(res.Stdout) >= 1<<20 ||
		strings.Trim(res.Stdout, "<") != "" || strings.Trim(res.Stderr, "<") != "" {
		t.Errorf("stored output: stdout %d bytes (truncated %v), stderr %d bytes (truncated %v)",
			len(res.Stdout), res.StdoutTruncated, len(res.Stderr), res.StderrTruncated)
	}
}

func TestSubmitAndWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{})
	tests := []struct {
		code   string
		status jobs.Status
		exit   int
		stdout string
	}{
		{"print 42", jobs.StatusSucceeded, 0, "42\n"},
		{"exit 3", jobs.StatusFailed, 3, ""},
		{"timeout", jobs.StatusTimeout, 124, ""},
	}
	for _, tc := range tests {
		res, err := b.client.SubmitAndWait(waitCtx(t), &jobs.Job{Image: "python", Code: tc.code, Labels: map[string]string{"k": "v"}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != tc.status || res.ExitCode() != tc.exit || res.Stdout != tc.stdout {
			t.Errorf("%q: got %s exit %d stdout %q, want %s %d %q", tc.code, res.Status, res.ExitCode(), res.Stdout, tc.status, tc.exit, tc.stdout)
		}
		if res.Worker != "w1" || res.Attempt != 1 || res.QueuedAt == nil || res.Labels["k"] != "v" || !jobs.ValidID(res.ID) {
			t.Errorf("%q: worker fields not filled: %+v", tc.code, res)
		}
		got, err := b.client.Get(t.Context(), res.ID)
		if err != nil || got.Status != res.Status {
			t.Errorf("Get(%s) = %v, %v", res.ID, got, err)
		}
	}
	if _, err := b.client.Get(t.Context(), "no-such-job"); !errors.Is(err, jobs.ErrNotFound) {
		t.Errorf("Get of an unknown ID: %v, want ErrNotFound", err)
	}
}

// The same ID submitted twice, with the worker restarted in between, runs
// once and both callers get the same result. A third copy published outside
// the duplicate window (another Nats-Msg-Id) is answered from RESULTS.
func TestSameIDRunsOnceAcrossRestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := &jobs.Job{ID: "same-id", Image: "python", Code: "sleep 50ms\nprint once", ReplyTo: "replies.same"}

	w1 := b.startWorker(t, worker.Config{ID: "first"})
	first, err := b.client.SubmitAndWait(waitCtx(t), job)
	if err != nil {
		t.Fatal(err)
	}
	w1.Stop(t)

	b.startWorker(t, worker.Config{ID: "second"})
	second, err := b.client.SubmitAndWait(waitCtx(t), job)
	if err != nil {
		t.Fatal(err)
	}

	sub, err := b.nc.SubscribeSync("replies.same")
	if err != nil {
		t.Fatal(err)
	}
	// The second copy's message leaves the stream once the worker has
	// answered it from RESULTS: until then a third would be refused.
	testutil.Eventually(t, 10*time.Second, "the second copy settled", func() bool {
		info, err := natstest.Stores(t, b.js).Stream.Info(t.Context())
		return err == nil && info.State.Msgs == 0
	})
	data, _ := json.Marshal(job)
	if _, err := b.js.Publish(t.Context(), fleet.Subject("default", "same-id"), data, jetstream.WithMsgID("other-msg-id")); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal("no reply to the third copy:", err)
	}
	third, err := jobs.DecodeResult(msg.Data)
	if err != nil {
		t.Fatal(err)
	}

	j1, _ := json.Marshal(first)
	for i, r := range []*jobs.Result{second, third} {
		if j, _ := json.Marshal(r); string(j) != string(j1) {
			t.Errorf("caller %d got another result:\n%s\nwant\n%s", i+2, j, j1)
		}
	}
	if n := b.exec.Runs("same-id"); n != 1 {
		t.Errorf("job ran %d times, want 1", n)
	}
	testutil.Eventually(t, 10*time.Second, "stream empty", func() bool {
		info, err := natstest.Stores(t, b.js).Stream.Info(t.Context())
		return err == nil && info.State.Msgs == 0
	})
}

// The same ID submitted again after the duplicate window, while the first
// copy runs on a worker with a free slot, does not run beside it: the
// stream keeps one message per job, and the job runs once.
func TestSameIDPastTheWindowWhileRunning(t *testing.T) {
	t.Parallel()
	b := setupWith(t, fleet.Topology{AckWait: 2 * time.Second, MaxJobBytes: 64 << 10, DuplicateWindow: 100 * time.Millisecond})
	b.startWorker(t, worker.Config{ID: "wa", Slots: 2})
	release := filepath.Join(t.TempDir(), "go")
	job := &jobs.Job{ID: "d", Image: "python", Code: "waitfile " + release + "\nprint done"}
	if _, err := b.client.Submit(waitCtx(t), job); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "running", func() bool { return b.exec.Running() == 1 })
	time.Sleep(300 * time.Millisecond) // past the duplicate window
	if id, err := b.client.Submit(waitCtx(t), job); err != nil || id != "d" {
		t.Fatalf("submit again: %q, %v", id, err)
	}
	// A second copy stored would go to the free slot and run beside the
	// first.
	if info, err := natstest.Stores(t, b.js).Stream.Info(t.Context()); err != nil || info.State.LastSeq != 1 {
		t.Fatalf("stream after the second submit: %+v, %v; want one message stored", info.State, err)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if res, err := b.client.Wait(waitCtx(t), "d"); err != nil || res.Status != jobs.StatusSucceeded {
		t.Fatalf("wait: %+v, %v", res, err)
	}
	if n := b.exec.Runs("d"); n != 1 {
		t.Fatalf("job d ran %d times; want once", n)
	}
}

func TestSlotsBoundConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{Slots: 2})
	var wg sync.WaitGroup
	results := make([]*jobs.Result, 10)
	errs := make([]error, 10)
	for i := range 10 {
		wg.Go(func() {
			results[i], errs[i] = b.client.SubmitAndWait(waitCtx(t), &jobs.Job{Image: "python", Code: "sleep 1s"})
		})
	}
	wg.Wait()
	for i := range 10 {
		if errs[i] != nil || results[i].Status != jobs.StatusSucceeded {
			t.Errorf("job %d: %v %+v", i, errs[i], results[i])
		}
	}
	if got := b.exec.MaxConcurrent(); got != 2 {
		t.Errorf("max concurrent sandboxes = %d, want 2", got)
	}
	if got := b.exec.Total(); got != 10 {
		t.Errorf("runs = %d, want 10", got)
	}
}

// The wire format is the API: a bare NATS client publishes JSON bytes.
func TestBareClientPublish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{})

	nc, _ := natstest.Connect(t, b.url)
	sub, err := nc.SubscribeSync("agent.7.results")
	if err != nil {
		t.Fatal(err)
	}
	body := `{"image":"python","code":"print 6*7","reply_to":"agent.7.results","labels":{"batch":"nightly"}}`
	if err := nc.Publish("jobs.default.bare-1", []byte(body)); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal("no result on reply_to:", err)
	}
	var onReply map[string]any
	if err := json.Unmarshal(msg.Data, &onReply); err != nil {
		t.Fatal(err)
	}
	if onReply["id"] != "bare-1" || onReply["status"] != "succeeded" || onReply["stdout"] != "6*7\n" {
		t.Errorf("reply: %s", msg.Data)
	}
	kv, err := b.js.KeyValue(t.Context(), "RESULTS")
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(t.Context(), "bare-1")
	if err != nil {
		t.Fatal("no result in RESULTS:", err)
	}
	if string(e.Value()) != string(msg.Data) {
		t.Errorf("RESULTS has %s, reply_to got %s", e.Value(), msg.Data)
	}
}

// manyEntries returns n JSON object entries "<prefix>0":"", ...
func manyEntries(n int, prefix string) string {
	e := make([]string, n)
	for i := range e {
		e[i] = fmt.Sprintf("%q:%q", prefix+strconv.Itoa(i), "")
	}
	return strings.Join(e, ",")
}

// sized returns a valid shell job of exactly n bytes.
func sized(n int) string {
	head, tail := `{"image":"shell","code":"print ok\n#`, `"}`
	return head + strings.Repeat("p", n-len(head)-len(tail)) + tail
}

func TestInvalidJobsRejected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{})
	long := strings.Repeat("x", 129)
	tests := []struct {
		name, id, body, want string
	}{
		{"bad JSON", "bad-json", `{"image": "python", "code": `, "not a job object"},
		{"unknown field", "unknown-field", `{"image":"python","cmd":"x"}`, "unknown field"},
		{"unknown preset", "unknown-preset", `{"image":"cobol","code":"x"}`, "unknown preset"},
		{"limits over the cap", "over-cap", `{"image":"python","limits":{"memory":"64g"}}`, "limits.memory: 64g is over the worker's cap"},
		{"network not allowed", "network", `{"image":"python","limits":{"network":true}}`, "limits.network"},
		{"oversized", "oversized", `{"image":"python","code":"` + strings.Repeat("a", 65<<10) + `"}`, "over the cap of 65536"},
		{"ID too long", long, `{"image":"python"}`, "must match"},
		{"ID mismatch", "subject-id", `{"id":"body-id","image":"python"}`, "does not match the subject"},
		{"bad file name", "bad-file", `{"image":"python","files":{"../x":""}}`, "files[\"../x\"]"},
		{"absolute file name", "abs-file", `{"image":"python","files":{"/etc/passwd":""}}`, "files[\"/etc/passwd\"]: a name must be relative"},
		{"NUL in a file name", "nul-file", `{"image":"python","files":{"a\u0000b":""}}`, "NUL"},
		{"file name too long", "long-file", `{"image":"python","files":{"` + strings.Repeat("f", 256) + `":""}}`, "1 to 255 bytes"},
		{"too many files", "many-files", `{"image":"python","files":{` + manyEntries(1001, "f") + `}}`, "files: 1001 files, over the limit of 1000"},
		{"too many env", "many-env", `{"image":"python","env":{` + manyEntries(257, "E") + `}}`, "env: 257 entries"},
		{"env name with =", "env-eq", `{"image":"python","env":{"A=B":"c"}}`, "env[\"A=B\"]"},
		{"too many labels", "many-labels", `{"image":"python","labels":{` + manyEntries(65, "l") + `}}`, "labels: 65 entries"},
		{"label value too long", "long-label", `{"image":"python","labels":{"k":"` + strings.Repeat("v", 1025) + `"}}`, "labels[\"k\"]: the value is 1025 bytes"},
		{"control character in a label", "ctl-label", `{"image":"python","labels":{"k":"a\u001b[2J"}}`, "control characters"},
		{"invalid UTF-8 in code", "utf8-code", "{\"image\":\"python\",\"code\":\"print(\xff)\"}", "code: not valid UTF-8"},
		{"invalid UTF-8 in stdin", "utf8-stdin", "{\"image\":\"python\",\"stdin\":\"\xc3\"}", "stdin: not valid UTF-8"},
		{"reply_to wildcard", "reply-gt", `{"image":"python","reply_to":">"}`, "reply_to"},
		{"reply_to JetStream API wildcard", "reply-js", `{"image":"python","reply_to":"$JS.API.>"}`, "reply_to"},
		{"reply_to JetStream API", "reply-js-delete", `{"image":"python","reply_to":"$JS.API.STREAM.DELETE.JOBS"}`, "system subject"},
		{"reply_to the job queue", "reply-queue", `{"image":"python","reply_to":"jobs.default.x"}`, "in the job queue"},
		{"reply_to another job's result", "reply-kv", `{"image":"shell","code":"print forged","reply_to":"$KV.RESULTS.victim"}`, "system subject"},
		{"one byte over the size cap", "over-by-one", sized(65<<10 + 1), "over the cap of 65536"},
		{"no image", "no-image", `{"code":"print 1"}`, "image: missing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := b.js.Publish(t.Context(), "jobs.default."+tc.id, []byte(tc.body)); err != nil {
				t.Fatal(err)
			}
			var res *jobs.Result
			var err error
			testutil.Eventually(t, 10*time.Second, "a result for "+tc.id, func() bool {
				res, err = b.client.Get(t.Context(), tc.id)
				return err == nil
			})
			if res.Status != jobs.StatusRejected || !strings.Contains(res.Error, tc.want) {
				t.Errorf("got %s %q, want rejected naming %q", res.Status, res.Error, tc.want)
			}
			if res.ID != tc.id || res.Worker != "w1" || res.ExitCode() != 2 {
				t.Errorf("result fields: %+v", res)
			}
		})
	}
	// No result was written for another job through a reply subject.
	if res, err := b.client.Get(t.Context(), "victim"); err == nil {
		t.Errorf("a job wrote the result of another: %+v", res)
	}
	// Still serving, and nothing invalid reached the sandbox; a job of
	// exactly the size cap runs.
	if _, err := b.js.Publish(t.Context(), "jobs.default.at-cap", []byte(sized(64<<10))); err != nil {
		t.Fatal(err)
	}
	res, err := b.client.SubmitAndWait(waitCtx(t), &jobs.Job{Image: "shell", Code: "print ok"})
	if err != nil || res.Status != jobs.StatusSucceeded {
		t.Fatalf("after rejections: %v %+v", err, res)
	}
	testutil.Eventually(t, 10*time.Second, "a result for the job at the size cap", func() bool {
		res, err = b.client.Get(t.Context(), "at-cap")
		return err == nil
	})
	if res.Status != jobs.StatusSucceeded {
		t.Errorf("a job of exactly the size cap: %s %q", res.Status, res.Error)
	}
	if n := b.exec.Total(); n != 2 {
		t.Errorf("sandbox runs = %d, want 2", n)
	}
	testutil.Eventually(t, 10*time.Second, "rejected jobs removed from the stream", func() bool {
		info, err := natstest.Stores(t, b.js).Stream.Info(t.Context())
		return err == nil && info.State.Msgs == 0
	})
}

// While the executor's infrastructure is down the worker holds the job,
// fetches nothing more, and runs it once the executor answers its pings:
// no delivery is burnt.
func TestInfrastructureDownBurnsNoDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec.SetDown(true)
	r := b.startWorker(t, worker.Config{Slots: 1})
	rw, err := b.client.Watch(t.Context(), "held")
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Stop()
	if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "held", Image: "python", Code: "print held"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "waiting", Image: "python", Code: "print w"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "worker reports not ready", func() bool { return !r.w.Ready() })
	// Longer than AckWait (2s): the lease is kept alive meanwhile.
	deadline := time.Now().Add(3 * time.Second)
	testutil.Eventually(t, 10*time.Second, "held past one lease", func() bool { return time.Now().After(deadline) })
	b.exec.SetDown(false)
	res, err := rw.Next(waitCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != jobs.StatusSucceeded || res.Attempt != 1 {
		t.Errorf("got %s attempt %d, want succeeded attempt 1", res.Status, res.Attempt)
	}
	res, err = b.client.Wait(waitCtx(t), "waiting")
	if err != nil || res.Attempt != 1 {
		t.Errorf("second job: %v %+v", err, res)
	}
}

// A job that runs longer than AckWait is not redelivered while it runs.
func TestLeaseKeptAlive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{ID: "a", Slots: 1})
	b.startWorker(t, worker.Config{ID: "b", Slots: 1})
	res, err := b.client.SubmitAndWait(waitCtx(t), &jobs.Job{ID: "long", Image: "python", Code: "sleep 5s"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != jobs.StatusSucceeded || res.Attempt != 1 || b.exec.Runs("long") != 1 {
		t.Errorf("got %s attempt %d runs %d", res.Status, res.Attempt, b.exec.Runs("long"))
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// Queued: finished as canceled without running.
	if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "queued", Image: "python", Code: "print no"}); err != nil {
		t.Fatal(err)
	}
	res, err := b.client.Cancel(t.Context(), "queued")
	if err != nil || res.Status != jobs.StatusCanceled {
		t.Fatalf("cancel queued: %v %+v", err, res)
	}
	if _, err := b.client.Cancel(t.Context(), "nope"); !errors.Is(err, jobs.ErrNotFound) {
		t.Errorf("cancel unknown: %v, want ErrNotFound", err)
	}

	b.startWorker(t, worker.Config{})
	// Running: its context is canceled.
	rw, err := b.client.Watch(t.Context(), "running")
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Stop()
	if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "running", Image: "python", Code: "block"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "job running", func() bool { return b.exec.Running() == 1 })
	if _, err := b.client.Cancel(t.Context(), "running"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "sandbox stopped", func() bool { return b.exec.Running() == 0 })
	if res, err := rw.Next(waitCtx(t)); err != nil || res.Status != jobs.StatusCanceled || res.ExitCode() != 130 || res.Worker != "w1" {
		t.Errorf("canceled running job: %v %+v", err, res)
	}
	testutil.Eventually(t, 10*time.Second, "stream empty", func() bool {
		info, err := natstest.Stores(t, b.js).Stream.Info(t.Context())
		return err == nil && info.State.Msgs == 0
	})
	if n := b.exec.Runs("queued"); n != 0 {
		t.Errorf("canceled queued job ran %d times", n)
	}
	if _, err := b.client.Cancel(t.Context(), "running"); !errors.Is(err, jobs.ErrFinished) {
		t.Errorf("cancel of a finished job: %v, want ErrFinished", err)
	}
}

// Drain finishes the jobs in flight; force naks them for redelivery.
func TestDrainAndForce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.startWorker(t, worker.Config{ID: "drainer"})
	if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "inflight", Image: "python", Code: "sleep 500ms\nprint done"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "job running", func() bool { return b.exec.Running() == 1 })
	r.Stop(t)
	res, err := b.client.Get(t.Context(), "inflight")
	if err != nil || res.Status != jobs.StatusSucceeded {
		t.Fatalf("drained job: %v %+v", err, res)
	}

	r = b.startWorker(t, worker.Config{ID: "forced"})
	if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "stuck", Image: "python", Code: "block"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "job running", func() bool { return b.exec.Running() == 1 })
	r.stop()
	r.force()
	r.Stop(t)
	if _, err := b.client.Get(t.Context(), "stuck"); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("forced job has a result: %v", err)
	}
	n0 := b.exec.Runs("stuck")
	b.startWorker(t, worker.Config{ID: "after"})
	testutil.Eventually(t, 10*time.Second, "job redelivered", func() bool { return b.exec.Runs("stuck") > n0 && b.exec.Running() == 1 })
	if _, err := b.client.Cancel(t.Context(), "stuck"); err != nil {
		t.Fatal(err)
	}
	res, err = b.client.Wait(waitCtx(t), "stuck")
	if err != nil || res.Status != jobs.StatusCanceled || res.Attempt < 2 || res.Worker != "after" {
		t.Errorf("redelivered job: %v %+v", err, res)
	}
}

func TestHeartbeat(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.startWorker(t, worker.Config{ID: "beater", Slots: 3, Version: "v9"})
	kv, err := b.js.KeyValue(t.Context(), fleet.WorkersBucket)
	if err != nil {
		t.Fatal(err)
	}
	var st jobs.WorkerStatus
	testutil.Eventually(t, 10*time.Second, "a heartbeat saying ready", func() bool {
		e, err := kv.Get(t.Context(), "beater")
		return err == nil && json.Unmarshal(e.Value(), &st) == nil && st.Ready
	})
	if st.Slots != 3 || st.Version != "v9" || st.Queue != "default" || !st.Ready {
		t.Errorf("heartbeat: %+v", st)
	}
	r.Stop(t)
	if _, err := kv.Get(t.Context(), "beater"); !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted) {
		t.Errorf("heartbeat left after stop: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg   worker.Config
		field string
	}{
		{worker.Config{Slots: -1}, "Slots"},
		{worker.Config{Queue: "a.b"}, "Queue"},
		{worker.Config{Topology: fleet.Topology{AckWait: time.Millisecond}}, "AckWait"},
	}
	for _, tc := range tests {
		err := tc.cfg.Validate()
		if !errors.Is(err, worker.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
	if err := (worker.Config{}).Validate(); err != nil {
		t.Errorf("zero config: %v", err)
	}
}
