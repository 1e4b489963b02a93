package batch_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/batch"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

type bundle struct {
	client *jobs.Client
	exec   *fakeexec.Executor
	stores *fleet.Stores
}

// setup starts an in-process JetStream server and a worker with slots
// slots on the fake executor, and returns a client of it.
func setup(t testing.TB, slots int, topo fleet.Topology) *bundle {
	t.Helper()
	return setupWorker(t, worker.Config{ID: "w1", Slots: slots, Topology: topo})
}

// setupWorker is setup with the worker's whole configuration.
func setupWorker(t testing.TB, cfg worker.Config) *bundle {
	t.Helper()
	topo := cfg.Topology
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	// The worker's topology is the fleet's: create it before the client.
	if _, err := topo.Ensure(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	exec := &fakeexec.Executor{}
	workertest.Start(t, js, exec, cfg)
	client, err := jobs.NewClient(t.Context(), js, jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{client: client, exec: exec, stores: natstest.Stores(t, js)}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// collector records what a batch reports.
type collector struct {
	mu       sync.Mutex
	outcomes map[string]batch.Outcome
	order    []string
	bad      []batch.BadLine
}

func (c *collector) config(name string) batch.Config {
	c.outcomes = map[string]batch.Outcome{}
	return batch.Config{
		Name: name,
		OnResult: func(o batch.Outcome) error {
			c.mu.Lock()
			defer c.mu.Unlock()
			if _, dup := c.outcomes[o.Result.ID]; dup {
				return fmt.Errorf("result of %s twice", o.Result.ID)
			}
			c.outcomes[o.Result.ID] = o
			c.order = append(c.order, o.Result.ID)
			return nil
		},
		OnBadLine: func(b batch.BadLine) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.bad = append(c.bad, b)
		},
	}
}

func (c *collector) byLine() map[int]batch.Outcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[int]batch.Outcome{}
	for _, o := range c.outcomes {
		m[o.Line] = o
	}
	return m
}

func TestRunMixedInput(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, fleet.Topology{})
	input := strings.Join([]string{
		`{"image":"python","code":"print ok"}`, // 1
		`{"image":"python","code":"exit 3"}`,   // 2
		``,                                     // 3: blank, skipped
		`{"id":"own-id","image":"python","code":"print mine"}`, // 4
		`not json`, // 5
		`{"image":"python","code":"x","bogus":1}`,               // 6: unknown field
		`{"id":"bad id","image":"python"}`,                      // 7
		`{"id":"own-id","image":"python","code":"print again"}`, // 8: duplicate id
		`{"image":"cobol","code":"x"}`,                          // 9: rejected by the worker
		`{"image":"python","code":"print ok"}`,                  // 10: same as 1, another job
		`{"image":"python","code":"timeout"}`,                   // 11, no newline at the end
	}, "\n")
	var col collector
	r, err := batch.New(b.client, col.config("mixed"))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := r.Run(ctxFor(t, 30*time.Second), strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	var badLines []int
	for _, bl := range col.bad {
		badLines = append(badLines, bl.Line)
		if !errors.Is(bl.Err, jobs.ErrInvalidJob) {
			t.Errorf("line %d: %v does not wrap ErrInvalidJob", bl.Line, bl.Err)
		}
	}
	if fmt.Sprint(badLines) != "[5 6 7 8]" {
		t.Errorf("bad lines %v, want [5 6 7 8]: %v", badLines, col.bad)
	}
	if !strings.Contains(col.bad[3].Err.Error(), "line 4") {
		t.Errorf("duplicate id error does not name the first line: %v", col.bad[3].Err)
	}
	got := col.byLine()
	want := map[int]jobs.Status{1: jobs.StatusSucceeded, 2: jobs.StatusFailed, 4: jobs.StatusSucceeded,
		9: jobs.StatusRejected, 10: jobs.StatusSucceeded, 11: jobs.StatusTimeout}
	if len(got) != len(want) {
		t.Errorf("%d outcomes, want %d: %v", len(got), len(want), got)
	}
	for line, st := range want {
		if o, ok := got[line]; !ok || o.Result.Status != st || o.Reused {
			t.Errorf("line %d: %+v, want %s", line, o, st)
		}
	}
	if got[4].Result.ID != "own-id" {
		t.Errorf("line 4 ran as %q, want its own id", got[4].Result.ID)
	}
	if id1, id10 := got[1].Result.ID, got[10].Result.ID; id1 == id10 || !strings.HasPrefix(id1, "mixed-") || !jobs.ValidID(id1) {
		t.Errorf("derived ids %q and %q: want distinct, mixed-...", id1, id10)
	}
	if sum.Total != 6 || sum.Done != 6 || sum.Bad != 4 || sum.Pending != 0 || sum.Reused != 0 ||
		sum.Statuses[jobs.StatusSucceeded] != 3 || sum.Interrupted || sum.AllSucceeded() {
		t.Errorf("summary %+v", sum)
	}
	if sum.Duration.P50 == nil || sum.Duration.Max == nil || *sum.Duration.Max < *sum.Duration.P50 {
		t.Errorf("duration percentiles %+v", sum.Duration)
	}
	if n := b.exec.Total(); n != 5 { // the rejected job never reaches a run
		t.Errorf("%d runs, want 5", n)
	}
}

func TestDeriveIDStable(t *testing.T) {
	t.Parallel()
	a := batch.DeriveID("n", []byte(`{"code":"x"}`), 0)
	if a != batch.DeriveID("n", []byte(`{"code":"x"}`), 0) {
		t.Fatal("not deterministic")
	}
	for _, other := range []string{
		batch.DeriveID("m", []byte(`{"code":"x"}`), 0),
		batch.DeriveID("n", []byte(`{"code":"y"}`), 0),
		batch.DeriveID("n", []byte(`{"code":"x"}`), 1),
	} {
		if other == a {
			t.Errorf("collision: %s", a)
		}
	}
	if !jobs.ValidID(batch.DeriveID(strings.Repeat("n", 64), nil, 0)) {
		t.Error("a 64-byte name makes an invalid id")
	}
}

func TestStrictPublishesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, fleet.Topology{})
	var col collector
	cfg := col.config("strict")
	cfg.Strict = true
	r, _ := batch.New(b.client, cfg)
	input := "{\"image\":\"python\",\"code\":\"print a\"}\n{oops\n{\"image\":\"python\",\"code\":\"print b\"}\n"
	sum, err := r.Run(ctxFor(t, 30*time.Second), strings.NewReader(input))
	if !errors.Is(err, batch.ErrBadInput) {
		t.Fatalf("err %v, want ErrBadInput", err)
	}
	if len(col.bad) != 1 || col.bad[0].Line != 2 || sum.Bad != 1 || sum.Done != 0 {
		t.Errorf("bad %v, summary %+v", col.bad, sum)
	}
	info, err := b.stores.Stream.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != 0 || b.exec.Total() != 0 {
		t.Errorf("published %d jobs, ran %d; want none", info.State.LastSeq, b.exec.Total())
	}
}

// TestResumeRunsNothingTwice interrupts a batch after a few results and
// runs it again: every job runs exactly once over both runs.
func TestResumeRunsNothingTwice(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, fleet.Topology{})
	const n = 40
	var in bytes.Buffer
	for i := range n {
		fmt.Fprintf(&in, `{"image":"python","code":"sleep 10ms\nprint %d"}`+"\n", i)
	}

	var col1 collector
	cfg := col1.config("resume")
	cfg.Window = 6
	ctx, cancel := context.WithCancel(ctxFor(t, 30*time.Second))
	sink := cfg.OnResult
	cfg.OnResult = func(o batch.Outcome) error {
		err := sink(o)
		if len(col1.byLine()) == 10 {
			cancel() // Ctrl-C
		}
		return err
	}
	r1, _ := batch.New(b.client, cfg)
	sum1, err := r1.Run(ctx, bytes.NewReader(in.Bytes()))
	if !errors.Is(err, context.Canceled) || !sum1.Interrupted || sum1.Done < 10 || sum1.Pending == 0 ||
		sum1.Done+sum1.Pending != n || sum1.InFlight > cfg.Window || sum1.InFlight > sum1.Pending {
		t.Fatalf("interrupted run: %v, %+v", err, sum1)
	}
	published := func() uint64 {
		info, err := b.stores.Stream.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	if p := published(); p >= n {
		t.Errorf("the interrupted run published %d of %d jobs: it did not stop publishing", p, n)
	}

	var col2 collector
	cfg2 := col2.config("resume")
	r2, _ := batch.New(b.client, cfg2)
	sum2, err := r2.Run(ctxFor(t, 30*time.Second), bytes.NewReader(in.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if sum2.Done != n || sum2.Statuses[jobs.StatusSucceeded] != n || sum2.Reused < sum1.Done || !sum2.AllSucceeded() {
		t.Errorf("resumed run: %+v (first run had %d done)", sum2, sum1.Done)
	}
	for id, o := range col1.outcomes {
		if o2 := col2.outcomes[id]; !o2.Reused || o2.Line != o.Line {
			t.Errorf("%s: done in run 1, not reused in run 2: %+v", id, o2)
		}
	}
	for id := range col2.outcomes {
		if runs := b.exec.Runs(id); runs != 1 {
			t.Errorf("%s ran %d times", id, runs)
		}
	}
	if b.exec.Total() != n {
		t.Errorf("%d runs in all, want %d", b.exec.Total(), n)
	}
	// A job still in flight when run 1 stopped may be published once more:
	// it can finish between run 2's lookup and its publish, and the stream
	// then takes the publish (a worker finds the stored result and runs
	// nothing: the Runs check above). A job done in run 1 is never
	// published again.
	if p := published(); p > uint64(n+sum1.InFlight) {
		t.Errorf("%d publishes for %d jobs (%d in flight at the interrupt): finished jobs were published again", p, n, sum1.InFlight)
	}

	// A third run publishes nothing and reuses everything.
	var col3 collector
	r3, _ := batch.New(b.client, col3.config("resume"))
	before := published()
	sum3, err := r3.Run(ctxFor(t, 30*time.Second), bytes.NewReader(in.Bytes()))
	if err != nil || sum3.Reused != n || published() != before || b.exec.Total() != n {
		t.Errorf("third run: %v %+v, published %d more", err, sum3, published()-before)
	}
}

// countingBackOff counts the retries of publishing.
type countingBackOff struct {
	backoff.BackOff
	n *atomic.Int64
}

func (c countingBackOff) NextBackOff() time.Duration {
	c.n.Add(1)
	return c.BackOff.NextBackOff()
}

func TestQueueFullIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, fleet.Topology{MaxMsgs: 3})
	const n = 30
	var in bytes.Buffer
	for i := range n {
		fmt.Fprintf(&in, `{"image":"python","code":"sleep 5ms\nprint %d"}`+"\n", i)
	}
	var retries atomic.Int64
	var col collector
	cfg := col.config("full")
	cfg.Window = 20
	cfg.Backoff = func() backoff.BackOff {
		return countingBackOff{backoff.NewConstantBackOff(5 * time.Millisecond), &retries}
	}
	r, _ := batch.New(b.client, cfg)
	sum, err := r.Run(ctxFor(t, 60*time.Second), bytes.NewReader(in.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !sum.AllSucceeded() || b.exec.Total() != n {
		t.Errorf("summary %+v, %d runs", sum, b.exec.Total())
	}
	if retries.Load() == 0 {
		t.Error("the queue never filled: the test proves nothing")
	}
	if m := b.exec.MaxConcurrent(); m != 1 {
		t.Errorf("max concurrent %d, want 1", m)
	}
}

// TestTenThousandLinesBoundedMemory streams 10,000 jobs of 8 KiB each
// (80 MiB of code) and samples the live heap: the runner must not hold the
// input.
func TestTenThousandLinesBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 jobs: skipped under -short")
	}
	// The in-process server shares this heap: without NoIndex it would
	// hold the job index's copies of the code (8 KiB a job) in its caches,
	// which is the server's memory, not the runner's.
	b := setupWorker(t, worker.Config{ID: "w1", Slots: 8, NoIndex: true})
	const n = 10_000
	pad := strings.Repeat("x", 8192)
	var in bytes.Buffer
	for i := range n {
		fmt.Fprintf(&in, `{"image":"python","code":"print %d\n#%s"}`+"\n", i, pad)
	}
	input := in.Bytes()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	var done atomic.Int64
	var r *batch.Runner
	r, _ = batch.New(b.client, batch.Config{
		Name: "big",
		OnResult: func(o batch.Outcome) error {
			if p := r.Progress(); p.InFlight > 64 {
				return fmt.Errorf("%d jobs in flight, over the window of 64", p.InFlight)
			}
			if done.Add(1)%1000 == 0 {
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				if ms.HeapAlloc > peak.Load() {
					peak.Store(ms.HeapAlloc)
				}
			}
			return nil
		},
	})
	start := time.Now()
	sum, err := r.Run(ctxFor(t, 10*time.Minute), bytes.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Done != n || !sum.AllSucceeded() || b.exec.Total() != n {
		t.Fatalf("summary %+v, %d runs", sum, b.exec.Total())
	}
	growth := int64(peak.Load()) - int64(base)
	t.Logf("10,000 jobs in %s (%.0f jobs/s); live heap %d MiB before, peak growth %d MiB (input %d MiB, held by the test)",
		time.Since(start).Round(time.Millisecond), sum.Throughput, base>>20, growth>>20, len(input)>>20)
	// The in-process server (its stream caches) and worker share this
	// heap; holding the input's code would add all of it on top of theirs.
	if growth > int64(len(input))*3/4 {
		t.Errorf("live heap grew by %d MiB during the batch", growth>>20)
	}
}

// BenchmarkWaiting compares the runner (one RESULTS watch for the batch)
// with the obvious alternative, a window of SubmitAndWait calls (one KV
// watch, i.e. one ordered consumer, per job), on 2,000 jobs through the
// fake executor:
//
//	go test ./pkg/batch -run '^$' -bench Waiting -benchtime 1x
func BenchmarkWaiting(b *testing.B) {
	const n, window = 2000, 64
	lines := func(tag string) []byte {
		var in bytes.Buffer
		for i := range n {
			fmt.Fprintf(&in, `{"id":"%s-%d-%d","image":"python","code":"print %d"}`+"\n", tag, b.N, i, i)
		}
		return in.Bytes()
	}
	b.Run("one-watch", func(b *testing.B) {
		bb := setup(b, 8, fleet.Topology{})
		for i := 0; b.Loop(); i++ {
			r, _ := batch.New(bb.client, batch.Config{Name: "bench", Window: window})
			sum, err := r.Run(b.Context(), bytes.NewReader(lines(fmt.Sprint("one", i))))
			if err != nil || sum.Done != n {
				b.Fatalf("%v %+v", err, sum)
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "jobs/s")
	})
	b.Run("watch-per-job", func(b *testing.B) {
		bb := setup(b, 8, fleet.Topology{})
		for i := 0; b.Loop(); i++ {
			sem := make(chan struct{}, window)
			var wg sync.WaitGroup
			var failed atomic.Int64
			for j := range n {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					job := &jobs.Job{ID: fmt.Sprintf("per-%d-%d", i, j), Image: "python", Code: fmt.Sprint("print ", j)}
					if _, err := bb.client.SubmitAndWait(b.Context(), job); err != nil {
						failed.Add(1)
					}
				})
			}
			wg.Wait()
			if failed.Load() > 0 {
				b.Fatalf("%d failed", failed.Load())
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "jobs/s")
	})
}

// Amend sees every valid line's job with its ID set: what it adds reaches
// the fleet without changing the derived IDs, and what it refuses is a bad
// line.
func TestAmend(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, fleet.Topology{})
	errRefused := errors.New("refused")
	var col collector
	cfg := col.config("amend")
	cfg.Amend = func(j *jobs.Job) error {
		if j.ID == "" || j.Queue == "" {
			return fmt.Errorf("amend saw id %q queue %q", j.ID, j.Queue)
		}
		if j.Code == "print no" {
			return errRefused
		}
		j.Labels = map[string]string{"who": "tester"}
		return nil
	}
	r, _ := batch.New(b.client, cfg)
	line1 := `{"image":"python","code":"print yes"}`
	input := line1 + "\n" + `{"image":"python","code":"print no"}` + "\n"
	sum, err := r.Run(ctxFor(t, 30*time.Second), strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	if len(col.bad) != 1 || col.bad[0].Line != 2 || !errors.Is(col.bad[0].Err, errRefused) {
		t.Errorf("bad lines %v, want line 2 refused", col.bad)
	}
	o, ok := col.byLine()[1]
	if !ok || o.Result.Labels["who"] != "tester" {
		t.Fatalf("line 1: %+v, want the amended label on its result", o)
	}
	want := batch.DeriveID("amend", []byte(`{"image":"python","code":"print yes"}`), 0)
	if o.Result.ID != want {
		t.Errorf("id %s, want %s (derived before Amend)", o.Result.ID, want)
	}
	if sum.Done != 1 || sum.Bad != 1 {
		t.Errorf("summary %+v", sum)
	}
}

// A file saved with a UTF-8 byte order mark (Notepad, PowerShell's
// Out-File) runs its first line like the others; CRLF endings too.
func TestByteOrderMarkAndCRLF(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, fleet.Topology{})
	input := "\uFEFF" + `{"image":"python","code":"print 1"}` + "\r\n" + `{"image":"python","code":"print 2"}` + "\r\n"
	var col collector
	r, _ := batch.New(b.client, col.config("bom"))
	sum, err := r.Run(ctxFor(t, 30*time.Second), strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	if len(col.bad) != 0 || sum.Total != 2 || !sum.AllSucceeded() {
		t.Errorf("bad lines %v, summary %+v: want both lines run", col.bad, sum)
	}
}

// An interrupt once the input is validated, while the result watch opens,
// is an interruption (ctx's error, Interrupted: submit batch exits 130 and
// prints how to resume), not ErrUnavailable (125, "fleet unavailable").
func TestInterruptWhileTheWatchOpens(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, fleet.Topology{})
	ctx, cancel := context.WithCancel(ctxFor(t, 30*time.Second))
	var col collector
	cfg := col.config("watchint")
	cfg.OnStart = func(int) error { cancel(); return nil } // Ctrl-C right after validation
	r, _ := batch.New(b.client, cfg)
	sum, err := r.Run(ctx, strings.NewReader(`{"image":"python","code":"print 1"}`+"\n"))
	if errors.Is(err, batch.ErrUnavailable) || !errors.Is(err, context.Canceled) || !sum.Interrupted {
		t.Errorf("err %v, interrupted %v: want context.Canceled and an interrupted summary", err, sum.Interrupted)
	}
}

// A job planted under the ID a batch line derives, with other code, is
// not that line's verdict: the line is a conflict naming both specs, no
// outcome is reported for it, and nothing counts as succeeded.
func TestPlantedResultIsAConflict(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, fleet.Topology{})
	ctx := ctxFor(t, 30*time.Second)
	line := `{"image":"python","code":"exit 1"}`
	id := batch.DeriveID("victim", []byte(line), 0)
	planted, err := b.client.SubmitAndWait(ctx, &jobs.Job{ID: id, Image: "python", Code: "print planted"})
	if err != nil || planted.Status != jobs.StatusSucceeded {
		t.Fatalf("planting %s: %+v, %v", id, planted, err)
	}
	var col collector
	r, err := batch.New(b.client, col.config("victim"))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := r.Run(ctx, strings.NewReader(line+"\n"+`{"image":"python","code":"print honest"}`+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := col.byLine()[1]; ok {
		t.Errorf("line 1 reported %s (reused %v): the planted job's verdict", o.Result.Status, o.Reused)
	}
	var ce *jobs.ConflictError
	if len(col.bad) != 1 || col.bad[0].Line != 1 || !errors.As(col.bad[0].Err, &ce) || ce.ID != id {
		t.Fatalf("bad lines %v, want line 1 as a conflict at %s", col.bad, id)
	}
	if o, ok := col.byLine()[2]; !ok || o.Result.Status != jobs.StatusSucceeded {
		t.Errorf("line 2: %+v, want succeeded", o)
	}
	if sum.Statuses[jobs.StatusSucceeded] != 1 || sum.Done != 1 || sum.Bad != 1 || sum.AllSucceeded() {
		t.Errorf("summary %+v: want 1 done, 1 bad, not all succeeded", sum)
	}
	// The client's own wait refuses it too.
	if _, err := b.client.SubmitAndWait(ctx, &jobs.Job{ID: id, Image: "python", Code: "exit 1"}); !errors.Is(err, jobs.ErrConflict) {
		t.Errorf("SubmitAndWait at the planted id: %v, want ErrConflict", err)
	}
}

// A line's own sandfleet.* labels are dropped: only the batch names its
// jobs' batch.
func TestLineCannotNameAnotherBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, fleet.Topology{})
	var col collector
	r, _ := batch.New(b.client, col.config("mine"))
	_, err := r.Run(ctxFor(t, 30*time.Second), strings.NewReader(`{"image":"python","code":"print x","labels":{"sandfleet.batch":"theirs","sandfleet.x":"y","k":"v"}}`+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	o, ok := col.byLine()[1]
	if !ok {
		t.Fatalf("no outcome: bad %v", col.bad)
	}
	if l := o.Result.Labels; l[jobs.BatchLabel] != "mine" || l["sandfleet.x"] != "" || l["k"] != "v" {
		t.Errorf("labels %v: want sandfleet.batch=mine, no sandfleet.x, k=v", l)
	}
}
