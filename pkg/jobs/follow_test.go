package jobs_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// standIn publishes a job's events and stores its result as a worker does,
// so that Follow is tested on the wire protocol alone.
type standIn struct {
	t      *testing.T
	js     jetstream.JetStream
	client *jobs.Client
	id     string
}

func (s *standIn) publish(ev jobs.Event) {
	s.t.Helper()
	ev.ID, ev.Time = s.id, time.Now().UTC()
	if ev.Attempt == 0 {
		ev.Attempt = 1
	}
	data, err := records.MarshalEvent(&ev)
	if err != nil {
		s.t.Fatal(err)
	}
	s.raw(data)
}

func (s *standIn) raw(data []byte) {
	s.t.Helper()
	if _, err := s.js.Publish(s.t.Context(), fleet.EventSubject(s.id), data); err != nil {
		s.t.Fatal(err)
	}
}

func (s *standIn) output(stream jobs.Stream, off int64, text string) {
	s.t.Helper()
	ev := jobs.Event{Type: jobs.EventOutput, Stream: stream, Offset: off}
	ev.SetData([]byte(text))
	s.publish(ev)
}

func (s *standIn) store(res *jobs.Result) {
	s.t.Helper()
	res.ID = s.id
	if _, _, err := records.StoreResult(s.t.Context(), natstest.Stores(s.t, s.js).Results, res, 0); err != nil {
		s.t.Fatal(err)
	}
}

func newStandIn(t *testing.T, id string, submit bool) *standIn {
	t.Helper()
	client, js := setup(t, fleet.Topology{})
	if tenant := jobs.TenantOf(id); tenant != "" {
		// As the worker that takes a tenant's job does first.
		if err := (fleet.Topology{}).EnsureTenantEvents(t.Context(), js, tenant); err != nil {
			t.Fatal(err)
		}
	}
	if submit {
		if _, err := client.Submit(t.Context(), &jobs.Job{ID: id, Image: "python", Code: "print(1)"}); err != nil {
			t.Fatal(err)
		}
	}
	return &standIn{t: t, js: js, client: client, id: id}
}

// follow collects what Follow yields on a channel, closed at its end.
func follow(t *testing.T, c *jobs.Client, id string, opts ...jobs.FollowOption) <-chan *jobs.Event {
	t.Helper()
	ch := make(chan *jobs.Event, 100)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	go func() {
		defer cancel()
		defer close(ch)
		for ev, err := range c.Follow(ctx, id, opts...) {
			if err != nil {
				ch <- &jobs.Event{Type: "error", Error: err.Error()}
				return
			}
			ch <- ev
		}
	}()
	return ch
}

func next(t *testing.T, ch <-chan *jobs.Event) *jobs.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("Follow ended")
		}
		if ev.Type == "error" {
			t.Fatalf("Follow: %s", ev.Error)
		}
		return ev
	case <-time.After(20 * time.Second):
		t.Fatal("no event within 20s")
	}
	return nil
}

func ended(t *testing.T, ch <-chan *jobs.Event) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if ok {
			t.Fatalf("Follow yielded %+v after the end", ev)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Follow did not end")
	}
}

// Follow while the job runs: each event as it is published, in order,
// then the finished event with the result read from RESULTS, output and
// all (the stream's carries none).
func TestFollowLive(t *testing.T) {
	t.Parallel()
	s := newStandIn(t, "live-1", true)
	ch := follow(t, s.client, "live-1")
	if ev := next(t, ch); ev.Type != jobs.EventQueued || ev.Attempt != 0 || ev.Time.IsZero() {
		t.Fatalf("first event %+v, want queued with its time", ev)
	}
	var last uint64
	step := func(want jobs.EventType) *jobs.Event {
		t.Helper()
		ev := next(t, ch)
		if ev.Type != want || ev.ID != "live-1" || ev.Seq <= last {
			t.Fatalf("got %+v, want %s after seq %d", ev, want, last)
		}
		last = ev.Seq
		return ev
	}
	s.publish(jobs.Event{Type: jobs.EventStarted, Worker: "w1", Container: "c1"})
	step(jobs.EventStarted)
	s.output(jobs.Stdout, 0, "one\n")
	if ev := step(jobs.EventOutput); string(ev.DataBytes()) != "one\n" || ev.Stream != jobs.Stdout {
		t.Fatalf("output %+v", ev)
	}
	bin := []byte{0xff, 0x00, 'x'}
	ev := jobs.Event{Type: jobs.EventOutput, Stream: jobs.Stderr}
	ev.SetData(bin)
	s.publish(ev)
	if ev := step(jobs.EventOutput); !bytes.Equal(ev.DataBytes(), bin) || ev.Encoding != jobs.EncodingBase64 {
		t.Fatalf("binary output %+v", ev)
	}
	s.raw([]byte("not an event"))
	s.raw([]byte(`{"type":"output","id":"someone-else","data":"forged"}`))
	s.store(&jobs.Result{Status: jobs.StatusSucceeded, Stdout: "one\n", Attempt: 1})
	s.publish(jobs.Event{Type: jobs.EventFinished, Result: &jobs.Result{ID: "live-1", Status: jobs.StatusSucceeded}})
	// The result may reach Follow before the worker's finished event does:
	// either way the last event is finished, with the stored result.
	fin := next(t, ch)
	if fin.Type != jobs.EventFinished || fin.Result == nil || fin.Result.Stdout != "one\n" || fin.Result.Status != jobs.StatusSucceeded {
		t.Fatalf("finished with %+v, want the stored result", fin.Result)
	}
	ended(t, ch)
}

// The worker was lost between storing the result and publishing finished:
// Follow ends on the result, once the events stored before it are out.
func TestFollowEndsOnResultWithoutFinished(t *testing.T) {
	t.Parallel()
	s := newStandIn(t, "lost-1", true)
	s.publish(jobs.Event{Type: jobs.EventStarted})
	for i := range 50 {
		s.output(jobs.Stdout, int64(i*2), "x\n")
	}
	s.store(&jobs.Result{Status: jobs.StatusFailed, Attempt: 1})
	ch := follow(t, s.client, "lost-1")
	next(t, ch) // queued
	next(t, ch) // started
	for range 50 {
		if ev := next(t, ch); ev.Type != jobs.EventOutput {
			t.Fatalf("got %+v, want output", ev)
		}
	}
	if ev := next(t, ch); ev.Type != jobs.EventFinished || ev.Seq != 0 || ev.Result.Status != jobs.StatusFailed {
		t.Fatalf("got %+v, want finished from RESULTS", ev)
	}
	ended(t, ch)
}

// An event the server sent while nothing more was pending, still waiting
// in Follow when the result reaches it, says nothing of what was stored
// by then: Follow yields everything stored before the result. Each round
// has an even chance of Follow taking the result first, which is the
// case this is about.
func TestFollowStalePending(t *testing.T) {
	t.Parallel()
	first := newStandIn(t, "stale-0", true)
	for i := range 20 {
		s := *first
		s.id = fmt.Sprintf("stale-%d", i)
		if i > 0 {
			if _, err := s.client.Submit(t.Context(), &jobs.Job{ID: s.id, Image: "python", Code: "print(1)"}); err != nil {
				t.Fatal(err)
			}
		}
		s.publish(jobs.Event{Type: jobs.EventStarted})
		s.output(jobs.Stdout, 0, "one\n")
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		var out string
		for ev, err := range s.client.Follow(ctx, s.id) {
			if err != nil {
				t.Fatal(err)
			}
			if ev.Type == jobs.EventStarted {
				// Meanwhile "one" is delivered, with nothing pending.
				time.Sleep(50 * time.Millisecond)
				s.output(jobs.Stdout, 4, "two\n")
				s.store(&jobs.Result{Status: jobs.StatusSucceeded, Attempt: 1})
				time.Sleep(100 * time.Millisecond) // the result reaches Follow too
			}
			if ev.Type == jobs.EventOutput {
				out += string(ev.DataBytes())
			}
		}
		cancel()
		if out != "one\ntwo\n" {
			t.Fatalf("round %d: followed output %q, want both events stored before the result", i, out)
		}
	}
}

// A job that finished long ago (its events expired, its message gone from
// JOBS) yields queued, from the result's queued_at, and its result.
func TestFollowResultOnly(t *testing.T) {
	t.Parallel()
	s := newStandIn(t, "old-1", false)
	queuedAt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s.store(&jobs.Result{Status: jobs.StatusSucceeded, Stdout: "done\n", QueuedAt: &queuedAt})
	ch := follow(t, s.client, "old-1")
	if ev := next(t, ch); ev.Type != jobs.EventQueued || !ev.Time.Equal(queuedAt) {
		t.Fatalf("got %+v, want queued at %s", ev, queuedAt)
	}
	if ev := next(t, ch); ev.Type != jobs.EventFinished || ev.Result.Stdout != "done\n" {
		t.Fatalf("got %+v", ev)
	}
	ended(t, ch)
}

// A fleet whose workers never created EVENTS: queued, then the result.
func TestFollowWithoutEventsStream(t *testing.T) {
	t.Parallel()
	s := newStandIn(t, "no-events-1", true)
	if err := s.js.DeleteStream(t.Context(), fleet.EventsStreamName); err != nil {
		t.Fatal(err)
	}
	ch := follow(t, s.client, "no-events-1")
	if ev := next(t, ch); ev.Type != jobs.EventQueued {
		t.Fatalf("got %+v", ev)
	}
	s.store(&jobs.Result{Status: jobs.StatusSucceeded, Stdout: "all\n"})
	if ev := next(t, ch); ev.Type != jobs.EventFinished || ev.Result.Stdout != "all\n" {
		t.Fatalf("got %+v", ev)
	}
	ended(t, ch)
}

func TestFollowUnknownJob(t *testing.T) {
	t.Parallel()
	client, _ := setup(t, fleet.Topology{})
	for _, id := range []string{"no-such-job", "not a valid id"} {
		for ev, err := range client.Follow(t.Context(), id) {
			if !errors.Is(err, jobs.ErrNotFound) {
				t.Errorf("Follow(%q): %+v, %v; want ErrNotFound", id, ev, err)
			}
		}
	}
}

// ReplayOnly yields what is stored and stops: without finished while the
// job runs, with it once the job finished.
func TestFollowReplayOnly(t *testing.T) {
	t.Parallel()
	s := newStandIn(t, "replay-1", true)
	s.publish(jobs.Event{Type: jobs.EventStarted})
	s.output(jobs.Stdout, 0, "so far\n")
	ch := follow(t, s.client, "replay-1", jobs.ReplayOnly())
	for _, want := range []jobs.EventType{jobs.EventQueued, jobs.EventStarted, jobs.EventOutput} {
		if ev := next(t, ch); ev.Type != want {
			t.Fatalf("got %+v, want %s", ev, want)
		}
	}
	ended(t, ch)

	s.store(&jobs.Result{Status: jobs.StatusSucceeded, Stdout: "so far\n"})
	ch = follow(t, s.client, "replay-1", jobs.ReplayOnly())
	for _, want := range []jobs.EventType{jobs.EventQueued, jobs.EventStarted, jobs.EventOutput, jobs.EventFinished} {
		if ev := next(t, ch); ev.Type != want {
			t.Fatalf("got %+v, want %s", ev, want)
		}
	}
	ended(t, ch)

	// A queued job with no events yet: queued, and nothing more.
	q := newStandIn(t, "replay-2", true)
	ch = follow(t, q.client, "replay-2", jobs.ReplayOnly())
	if ev := next(t, ch); ev.Type != jobs.EventQueued {
		t.Fatalf("got %+v", ev)
	}
	ended(t, ch)
}

// Stopping the loop leaves nothing running: the next Follow starts over.
func TestFollowBreak(t *testing.T) {
	t.Parallel()
	s := newStandIn(t, "break-1", true)
	s.publish(jobs.Event{Type: jobs.EventStarted})
	for range 2 {
		n := 0
		for ev, err := range s.client.Follow(t.Context(), "break-1") {
			if err != nil {
				t.Fatal(err)
			}
			n++
			if ev.Type == jobs.EventStarted {
				break
			}
		}
		if n != 2 {
			t.Fatalf("%d events before the break, want 2", n)
		}
	}
}

// A tenant's client follows its own jobs without binding a stream: the
// result by key, the events by a consumer filtered to the job and direct
// gets; a job with no result is queued (it cannot read JOBS), with no
// time; another tenant's job is not found.
func TestFollowTenant(t *testing.T) {
	t.Parallel()
	s := newStandIn(t, "team-a.live-1", true)
	tc, err := jobs.NewTenantClient(s.js, "team-a", jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ch := follow(t, tc, s.id, jobs.ReplayOnly())
	if ev := next(t, ch); ev.Type != jobs.EventQueued || !ev.Time.IsZero() {
		t.Fatalf("first event %+v, want queued without a time", ev)
	}
	ended(t, ch)

	ch = follow(t, tc, s.id)
	next(t, ch) // queued
	s.publish(jobs.Event{Type: jobs.EventStarted, Worker: "w1"})
	if ev := next(t, ch); ev.Type != jobs.EventStarted || ev.Seq == 0 {
		t.Fatalf("got %+v, want started", ev)
	}
	s.output(jobs.Stdout, 0, "one\n")
	if ev := next(t, ch); ev.Type != jobs.EventOutput || string(ev.DataBytes()) != "one\n" {
		t.Fatalf("got %+v, want output", ev)
	}
	s.output(jobs.Stdout, 4, "two\n")
	s.store(&jobs.Result{Status: jobs.StatusSucceeded, Stdout: "one\ntwo\n", Attempt: 1})
	if ev := next(t, ch); ev.Type != jobs.EventOutput || string(ev.DataBytes()) != "two\n" {
		t.Fatalf("got %+v, want the output stored before the result", ev)
	}
	if fin := next(t, ch); fin.Type != jobs.EventFinished || fin.Result.Stdout != "one\ntwo\n" {
		t.Fatalf("got %+v, want finished with the stored result", fin)
	}
	ended(t, ch)

	// After the end: everything again, then the result.
	ch = follow(t, tc, s.id)
	for _, want := range []jobs.EventType{jobs.EventQueued, jobs.EventStarted, jobs.EventOutput, jobs.EventOutput, jobs.EventFinished} {
		if ev := next(t, ch); ev.Type != want {
			t.Fatalf("got %+v, want %s", ev, want)
		}
	}
	ended(t, ch)
	if _, err := tc.Wait(t.Context(), s.id); err != nil {
		t.Fatal(err)
	}
	// What the follows and the wait made is gone: a stream holds 1,000
	// consumers at most, and every tenant shares RESULTS and EVENTS.
	for _, name := range []string{"KV_" + fleet.ResultsBucket, fleet.EventsStreamOf("team-a")} {
		st, err := s.js.Stream(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Consumers != 0 {
			t.Errorf("%s has %d consumers left, want none", name, info.State.Consumers)
		}
	}

	for ev, err := range tc.Follow(t.Context(), "team-b.live-1") {
		if !errors.Is(err, jobs.ErrNotFound) {
			t.Errorf("another tenant's job: %+v, %v; want ErrNotFound", ev, err)
		}
	}

	// A fleet without the tenant's events: queued, then the result.
	if err := s.js.DeleteStream(t.Context(), fleet.EventsStreamOf("team-a")); err != nil {
		t.Fatal(err)
	}
	ch = follow(t, tc, s.id)
	for _, want := range []jobs.EventType{jobs.EventQueued, jobs.EventFinished} {
		if ev := next(t, ch); ev.Type != want {
			t.Fatalf("without EVENTS: got %+v, want %s", ev, want)
		}
	}
	ended(t, ch)
}

func TestTopologyEvents(t *testing.T) {
	t.Parallel()
	_, js := setup(t, fleet.Topology{EventsMaxAge: 10 * time.Minute, EventsMaxBytes: 1 << 20})
	st, err := js.Stream(t.Context(), fleet.EventsStreamName)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	if cfg.Retention != jetstream.LimitsPolicy || cfg.Discard != jetstream.DiscardOld || cfg.MaxAge != 10*time.Minute ||
		cfg.MaxBytes != 1<<20 || cfg.Subjects[0] != "events.*" || cfg.Storage != jetstream.FileStorage {
		t.Errorf("stream EVENTS: %+v", cfg)
	}
	if def := (fleet.Topology{}).WithDefaults(); def.EventsMaxAge != time.Hour || def.EventsMaxBytes != 1<<30 {
		t.Errorf("defaults: %s, %d", def.EventsMaxAge, def.EventsMaxBytes)
	}
}

// SetData keeps the bytes exactly and never takes more than base64.
func FuzzEventData(f *testing.F) {
	for _, s := range []string{"", "hello\n", "a\nb\n", "\x00\x01\x1b[2J", "\xff\xfe", "€ < > & \u2028", `"\`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		var ev jobs.Event
		ev.SetData(p)
		data, err := records.MarshalEvent(&jobs.Event{Data: ev.Data})
		if err != nil {
			t.Fatal(err)
		}
		empty, _ := records.MarshalEvent(&jobs.Event{})
		if n := len(data) - len(empty) - len(`,"data":""`); len(p) > 0 && n > base64.StdEncoding.EncodedLen(len(p)) {
			t.Errorf("%q takes %d bytes as %q, more than base64", p, n, ev.Encoding)
		}
		var back jobs.Event
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		back.Encoding = ev.Encoding
		if !bytes.Equal(back.DataBytes(), p) {
			t.Errorf("%q came back as %q", p, back.DataBytes())
		}
	})
}
