package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// recordingSink stands in for the broker: it records what is published
// and, while held, blocks each publish until released (or its context
// ends), as a broker that does not keep up would.
type recordingSink struct {
	mu      sync.Mutex
	events  []jobs.Event
	bytes   int
	held    chan struct{} // closed: publishes go through
	blocked chan struct{} // a publish waits (1-buffered)
}

func newSink(held bool) *recordingSink {
	s := &recordingSink{held: make(chan struct{}), blocked: make(chan struct{}, 1)}
	if !held {
		close(s.held)
	}
	return s
}

func (s *recordingSink) release() { close(s.held) }

func (s *recordingSink) PublishMsg(ctx context.Context, msg *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	select {
	case <-s.held:
	default:
		select {
		case s.blocked <- struct{}{}:
		default:
		}
		select {
		case <-s.held:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var ev jobs.Event
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, ev)
	s.bytes += len(msg.Data)
	return &jetstream.PubAck{}, nil
}

// PublishNoAck records msg at once, held or not: a publish nobody acks
// does not wait for the broker.
func (s *recordingSink) PublishNoAck(msg *nats.Msg) error {
	var ev jobs.Event
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, ev)
	s.bytes += len(msg.Data)
	return nil
}

func (s *recordingSink) published() ([]jobs.Event, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]jobs.Event(nil), s.events...), s.bytes
}

var _ eventSink = (*recordingSink)(nil)

func testEvents(t *testing.T, sink eventSink, outputCap int64) *jobEvents {
	t.Helper()
	e := newJobEvents(sink, "j1", 1, "w1", outputCap, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { e.close(context.Background()) })
	return e
}

func start(e *jobEvents, outputCap int64) {
	lim := limits.Default()
	lim.Output = limits.Size(outputCap)
	e.started(jobrun.Start{Container: "c1", Limits: lim})
}

// streamBytes puts the output events of s back together, and the gaps'
// byte counts, checking that they tile the stream from 0.
func streamBytes(t *testing.T, evs []jobs.Event, s jobs.Stream) (out []byte, gaps int64) {
	t.Helper()
	next := int64(0)
	for _, ev := range evs {
		if ev.Stream != s {
			continue
		}
		switch ev.Type {
		case jobs.EventOutput:
			if ev.Offset != next {
				t.Fatalf("%s output at %d, want %d", s, ev.Offset, next)
			}
			out = append(out, ev.DataBytes()...)
			next += int64(len(ev.DataBytes()))
		case jobs.EventGap:
			if ev.Offset != next {
				t.Fatalf("%s gap at %d, want %d", s, ev.Offset, next)
			}
			gaps += ev.Bytes
			next += ev.Bytes
		}
	}
	return out, gaps
}

func types(evs []jobs.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		b.WriteString(string(ev.Type))
		if ev.Stream != "" {
			b.WriteString(":" + string(ev.Stream))
		}
		b.WriteByte(' ')
	}
	return strings.TrimSpace(b.String())
}

// Output is coalesced in order, per stream, while the broker is busy;
// every event carries the attempt; text split at the chunk size stays
// whole characters.
func TestJobEventsCoalesceInOrder(t *testing.T) {
	t.Parallel()
	sink := newSink(true)
	e := testEvents(t, sink, 1<<20)
	start(e, 1<<20)
	<-sink.blocked // the started event is being published: the rest queues
	e.output(jobs.Stdout, []byte("a\n"))
	e.output(jobs.Stdout, []byte("b\n"))
	e.output(jobs.Stderr, []byte("e\n"))
	e.output(jobs.Stdout, []byte("c\n"))
	euros := strings.Repeat("€", 12000) // 36000 bytes: 3 chunks, none cut inside a "€"
	e.output(jobs.Stderr, []byte(euros))
	sink.release()
	e.finished(&jobs.Result{ID: "j1", Status: jobs.StatusSucceeded, Stdout: "a\nb\nc\n", Stderr: "e\n" + euros})
	e.close(context.Background())

	evs, _ := sink.published()
	want := "started output:stdout output:stderr output:stdout output:stderr output:stderr output:stderr finished"
	if got := types(evs); got != want {
		t.Fatalf("events %s\nwant   %s", got, want)
	}
	for _, ev := range evs {
		if ev.ID != "j1" || ev.Attempt != 1 || ev.Time.IsZero() {
			t.Errorf("event without its job, attempt or time: %+v", ev)
		}
		if ev.Type == jobs.EventOutput && (ev.Encoding != "" || !utf8.ValidString(ev.Data) || len(ev.Data) > eventChunk) {
			t.Errorf("output event of %d bytes, encoding %q: want whole UTF-8 text of at most %d", len(ev.Data), ev.Encoding, eventChunk)
		}
	}
	if out, _ := streamBytes(t, evs, jobs.Stdout); string(out) != "a\nb\nc\n" {
		t.Errorf("stdout %q", out)
	}
	if out, _ := streamBytes(t, evs, jobs.Stderr); string(out) != "e\n"+euros {
		t.Errorf("stderr: %d bytes, want %d", len(out), len("e\n"+euros))
	}
	if evs[1].Data != "a\nb\n" || evs[0].Worker != "w1" || evs[0].Container != "c1" {
		t.Errorf("first events %+v, %+v", evs[0], evs[1])
	}
	if r := evs[len(evs)-1].Result; r == nil || r.Status != jobs.StatusSucceeded || r.Stdout != "" || r.Stderr != "" {
		t.Errorf("finished carries %+v, want the result without its output", r)
	}
}

// Past the output cap a stream says output_truncated once; the bytes
// before it are all there.
func TestJobEventsOutputCap(t *testing.T) {
	t.Parallel()
	sink := newSink(false)
	e := testEvents(t, sink, 1<<20)
	start(e, 100)
	e.output(jobs.Stdout, bytes.Repeat([]byte("x"), 60))
	e.output(jobs.Stdout, bytes.Repeat([]byte("y"), 60))
	e.output(jobs.Stdout, bytes.Repeat([]byte("z"), 1000))
	e.flush(context.Background())
	evs, _ := sink.published()
	out, gaps := streamBytes(t, evs, jobs.Stdout)
	if string(out) != strings.Repeat("x", 60)+strings.Repeat("y", 40) || gaps != 0 {
		t.Errorf("stdout %q, gaps %d", out, gaps)
	}
	last := evs[len(evs)-1]
	if last.Type != jobs.EventOutputTruncated || last.Stream != jobs.Stdout || last.Offset != 100 {
		t.Errorf("last event %+v, want output_truncated of stdout at 100", last)
	}
	if n := strings.Count(types(evs), "output_truncated"); n != 1 {
		t.Errorf("%d output_truncated events", n)
	}
}

// A broker that does not keep up never holds the job: output that does
// not fit the queue is dropped, and published as a gap of exactly the
// bytes dropped, from where they start.
func TestJobEventsGapWhenBrokerSlow(t *testing.T) {
	t.Parallel()
	sink := newSink(true)
	e := testEvents(t, sink, 4<<20)
	start(e, 4<<20)
	<-sink.blocked
	t0 := time.Now()
	e.output(jobs.Stdout, bytes.Repeat([]byte("o"), 3<<19)) // 1.5 MiB: 1 MiB fits
	e.output(jobs.Stderr, bytes.Repeat([]byte("e"), 1000))
	e.output(jobs.Stdout, []byte("tail\n"))
	if d := time.Since(t0); d > time.Second {
		t.Errorf("output took %s with the broker held", d)
	}
	sink.release()
	e.flush(context.Background())
	e.output(jobs.Stdout, []byte("after\n"))
	e.flush(context.Background())

	evs, _ := sink.published()
	out, gaps := streamBytes(t, evs, jobs.Stdout)
	if len(out) != eventQueueMax+len("after\n") || gaps != 3<<19-eventQueueMax+int64(len("tail\n")) ||
		!strings.HasSuffix(string(out), "after\n") {
		t.Errorf("stdout: %d bytes published, %d in gaps", len(out), gaps)
	}
	if out, gaps := streamBytes(t, evs, jobs.Stderr); len(out) != 0 || gaps != 1000 {
		t.Errorf("stderr: %d bytes published, %d in gaps", len(out), gaps)
	}
}

// Small writes to stdout and stderr in turn make one event each; the
// delivery's events stay within their budget, twice the output cap plus
// eventOverhead, and the stream that went past it says output_truncated.
func TestJobEventsBudget(t *testing.T) {
	t.Parallel()
	sink := newSink(false)
	e := testEvents(t, sink, 4096)
	start(e, 4096)
	for range 8 {
		for range 512 {
			e.output(jobs.Stdout, []byte("o"))
			e.output(jobs.Stderr, []byte("e"))
		}
		e.flush(context.Background())
	}
	evs, n := sink.published()
	if n > 2*4096+eventOverhead+1024 {
		t.Errorf("%d bytes published, over the budget of %d", n, 2*4096+eventOverhead)
	}
	if got := strings.Count(types(evs), "output_truncated"); got != 2 {
		t.Errorf("%d output_truncated events, want one per stream", got)
	}
	t.Logf("%d events, %d bytes", len(evs), n)
}

// When the events are not stored within eventFlushWait, the output still
// queued is published as gaps, which the broker takes sooner, so that the
// result is not kept waiting behind it; nor is finished.
func TestJobEventsHurryAfterFlushWait(t *testing.T) {
	t.Parallel()
	sink := newSink(true)
	e := testEvents(t, sink, 1<<20)
	start(e, 1<<20)
	<-sink.blocked
	e.output(jobs.Stdout, bytes.Repeat([]byte("o"), 100<<10))
	t0 := time.Now()
	time.AfterFunc(eventFlushWait+eventFlushWait/4, sink.release)
	e.flush(context.Background())
	if d := time.Since(t0); d < eventFlushWait || d >= 2*eventFlushWait {
		t.Errorf("flush returned after %s, want between %s and %s", d, eventFlushWait, 2*eventFlushWait)
	}
	e.finished(&jobs.Result{ID: "j1", Status: jobs.StatusSucceeded})
	e.close(context.Background())
	evs, _ := sink.published()
	if got := types(evs); got != "started gap:stdout finished" {
		t.Errorf("events %s", got)
	}
	if _, gaps := streamBytes(t, evs, jobs.Stdout); gaps != 100<<10 {
		t.Errorf("gap of %d bytes", gaps)
	}
}

// A forced stop does not wait for the broker.
func TestJobEventsCloseOnForce(t *testing.T) {
	t.Parallel()
	sink := newSink(true)
	e := newJobEvents(sink, "j1", 1, "w1", 1<<20, slog.New(slog.NewTextHandler(io.Discard, nil)))
	start(e, 1<<20)
	<-sink.blocked
	force, cancel := context.WithCancel(context.Background())
	cancel()
	t0 := time.Now()
	e.close(force)
	if d := time.Since(t0); d > time.Second {
		t.Errorf("close with force took %s", d)
	}
}

func TestChunkCut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p     string
		room  int
		force bool
		want  int
	}{
		{"abc", 5, false, 3},
		{"abcdef", 4, false, 4},
		{"a€b", 2, false, 1}, // "€" is 3 bytes from 1
		{"a€b", 3, false, 1},
		{"a€b", 4, false, 4},
		{"€€", 1, false, 0},                  // no room for a whole "€": none
		{"\x80\x80\x80\x80\x80", 3, true, 3}, // no character start: cut anyway
		{"\x80\x80\x80\x80\x80", 3, false, 0},
	} {
		if got := chunkCut([]byte(tc.p), tc.room, tc.force); got != tc.want {
			t.Errorf("chunkCut(%q, %d, %v) = %d, want %d", tc.p, tc.room, tc.force, got, tc.want)
		}
	}
}
