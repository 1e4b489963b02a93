package worker_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// followAll collects a job's events until finished.
func followAll(t *testing.T, c *jobs.Client, id string) []*jobs.Event {
	t.Helper()
	var evs []*jobs.Event
	for ev, err := range c.Follow(waitCtx(t), id) {
		if err != nil {
			t.Fatalf("follow %s: %v (after %s)", id, err, eventTypes(evs))
		}
		evs = append(evs, ev)
	}
	return evs
}

// eventTypes is "type/attempt[:stream]" of each event, for comparisons.
func eventTypes(evs []*jobs.Event) string {
	var parts []string
	for _, ev := range evs {
		s := string(ev.Type) + "/" + string(rune('0'+ev.Attempt))
		if ev.Stream != "" {
			s += ":" + string(ev.Stream)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// output is the bytes of the output events of one attempt and stream.
func output(evs []*jobs.Event, attempt int, s jobs.Stream) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type == jobs.EventOutput && ev.Attempt == attempt && ev.Stream == s {
			b.Write(ev.DataBytes())
		}
	}
	return b.String()
}

// What a watcher sees of each kind of job: its lifecycle, its output in
// order, and the stored result last.
func TestJobEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, worker.Config{})
	off := setup(t)
	off.startWorker(t, worker.Config{NoEvents: true})
	for _, tc := range []struct {
		name, code, image string
		b                 *bundle
		want              string
		stdout, stderr    string
		status            jobs.Status
	}{
		{"output", "print a\neprint b\nprint c\nexit 3", "python", b,
			"queued/0 started/1 output/1:stdout output/1:stderr output/1:stdout finished/1", "a\nc\n", "b\n", jobs.StatusFailed},
		{"timeout", "timeout", "python", b, "queued/0 started/1 timeout/1 finished/1", "", "", jobs.StatusTimeout},
		{"rejected by the executor", "print x", "cobol", b, "queued/0 finished/1", "", "", jobs.StatusRejected},
		{"events off", "print a", "python", off, "queued/0 finished/1", "", "", jobs.StatusSucceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := strings.ReplaceAll(tc.name, " ", "-")
			if _, err := tc.b.client.Submit(waitCtx(t), &jobs.Job{ID: id, Image: tc.image, Code: tc.code}); err != nil {
				t.Fatal(err)
			}
			evs := followAll(t, tc.b.client, id)
			if got := eventTypes(evs); got != tc.want {
				t.Errorf("events %s\nwant   %s", got, tc.want)
			}
			if got := output(evs, 1, jobs.Stdout); got != tc.stdout {
				t.Errorf("stdout events %q, want %q", got, tc.stdout)
			}
			if got := output(evs, 1, jobs.Stderr); got != tc.stderr {
				t.Errorf("stderr events %q, want %q", got, tc.stderr)
			}
			last := evs[len(evs)-1]
			if last.Result == nil || last.Result.Status != tc.status || last.Result.Worker != "w1" {
				t.Fatalf("last event %+v, want the stored result", last)
			}
			if tc.b == b && tc.status == jobs.StatusFailed && last.Result.Stdout != "a\nc\n" {
				t.Errorf("the finished event's result has stdout %q, want the stored one", last.Result.Stdout)
			}
			for _, ev := range evs[1:] {
				if ev.Type == jobs.EventStarted && (ev.Worker != "w1" || ev.Container != "fake-"+id) {
					t.Errorf("started %+v, want worker and container", ev)
				}
			}
		})
	}
}

// A job handed back mid-run (a forced stop of its worker) and run again
// elsewhere: a watcher sees attempt 1's output, then redelivered, then
// attempt 2 from its start, then finished.
func TestJobEventsRedelivered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w1 := b.startWorker(t, worker.Config{ID: "w1"})
	release := filepath.Join(t.TempDir(), "release")
	if _, err := b.client.Submit(waitCtx(t), &jobs.Job{ID: "again", Image: "python", Code: "print one\nwaitfile " + release + "\nprint two"}); err != nil {
		t.Fatal(err)
	}
	evs := make(chan *jobs.Event, 100)
	go func() {
		defer close(evs)
		for ev, err := range b.client.Follow(waitCtx(t), "again") {
			if err != nil {
				t.Errorf("follow: %v", err)
				return
			}
			evs <- ev
		}
	}()
	var got []*jobs.Event
	for len(got) == 0 || got[len(got)-1].Type != jobs.EventOutput {
		got = append(got, <-evs)
	}
	w1.force()
	w1.Stop(t)
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	b.startWorker(t, worker.Config{ID: "w2"})
	for ev := range evs {
		got = append(got, ev)
	}
	want := "queued/0 started/1 output/1:stdout redelivered/2 started/2 output/2:stdout"
	if s := eventTypes(got); !strings.HasPrefix(s, want) || !strings.HasSuffix(s, "finished/2") {
		t.Errorf("events %s\nwant   %s ... finished/2", s, want)
	}
	if o1, o2 := output(got, 1, jobs.Stdout), output(got, 2, jobs.Stdout); o1 != "one\n" || o2 != "one\ntwo\n" {
		t.Errorf("attempt 1 wrote %q, attempt 2 %q", o1, o2)
	}
	if r := got[len(got)-1].Result; r.Attempt != 2 || r.Worker != "w2" || r.Stdout != "one\ntwo\n" {
		t.Errorf("result %+v", r)
	}
}

// slowBroker delays every publish of an event, as a broker that does not
// keep up would; everything else goes through at once.
type slowBroker struct {
	jetstream.JetStream
	delay time.Duration
}

func (s slowBroker) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if strings.HasPrefix(m.Subject, fleet.EventSubjectPrefix) {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.JetStream.PublishMsg(ctx, m, opts...)
}

// Streaming never holds a job up: with a broker that takes 300 ms per
// event, a job writing 1.5 MB to each stream at once is not slowed down
// (OnOutput only queues); what the broker could not take is published as
// gaps that account for every byte, before the result, which has it all.
func TestJobEventsSlowBroker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.js = slowBroker{JetStream: b.js, delay: 300 * time.Millisecond}
	b.startWorker(t, worker.Config{})
	const n = 1_500_000
	job := &jobs.Job{ID: "flood", Image: "python", Code: "flood 1500000 x", Limits: limits.Limits{Output: 2 * limits.MiB}}
	if _, err := b.client.Submit(waitCtx(t), job); err != nil {
		t.Fatal(err)
	}
	evs := followAll(t, b.client, "flood")
	res := evs[len(evs)-1].Result
	if res == nil || res.Status != jobs.StatusSucceeded || len(res.Stdout) != n || len(res.Stderr) != n {
		t.Fatalf("result %+v", res)
	}
	// Held up by the broker, it would take 300 ms per 16 KiB: 19 s.
	if *res.DurationMS > 5000 {
		t.Errorf("the job took %d ms", *res.DurationMS)
	}
	for _, s := range []jobs.Stream{jobs.Stdout, jobs.Stderr} {
		var shown, gaps, next int64
		for _, ev := range evs {
			if ev.Stream != s || (ev.Type != jobs.EventOutput && ev.Type != jobs.EventGap) {
				continue
			}
			if ev.Offset != next {
				t.Fatalf("%s: %s at %d, want %d", s, ev.Type, ev.Offset, next)
			}
			if ev.Type == jobs.EventGap {
				gaps += ev.Bytes
				next += ev.Bytes
			} else {
				shown += int64(len(ev.DataBytes()))
				next += int64(len(ev.DataBytes()))
			}
		}
		t.Logf("%s: %d bytes streamed, %d in gaps", s, shown, gaps)
		if shown+gaps != n || gaps == 0 {
			t.Errorf("%s: %d bytes streamed and %d in gaps, want %d in all, some in gaps", s, shown, gaps, n)
		}
	}
}
