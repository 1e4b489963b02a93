package jobs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

func setup(t *testing.T, topo fleet.Topology) (*jobs.Client, jetstream.JetStream) {
	t.Helper()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	return clientOn(t, js, topo), js
}

// clientOn opens topo on js, creating what is missing with its settings
// (as a worker's would be), and returns a client with topo's cap on a
// job's size and its CancelWait.
func clientOn(t *testing.T, js jetstream.JetStream, topo fleet.Topology) *jobs.Client {
	t.Helper()
	if _, err := topo.Open(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	c, err := jobs.NewClient(t.Context(), js, jobs.Config{MaxJobBytes: topo.MaxJobBytes, CancelWait: topo.CancelWait})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSubmitDeduplicatesAndQueueFull(t *testing.T) {
	t.Parallel()
	c, js := setup(t, fleet.Topology{MaxMsgs: 2})
	job := &jobs.Job{Image: "python", Code: "print(1)"}
	id, err := c.Submit(t.Context(), job)
	if err != nil || !jobs.ValidID(id) || job.ID != "" {
		t.Fatalf("Submit = %q, %v (job.ID %q must stay empty)", id, err, job.ID)
	}
	job.ID = id
	if _, err := c.Submit(t.Context(), job); err != nil {
		t.Fatalf("duplicate Submit: %v", err)
	}
	info, _ := natstest.Stores(t, js).Stream.Info(t.Context())
	if info.State.Msgs != 1 {
		t.Errorf("stream holds %d messages after a duplicate, want 1", info.State.Msgs)
	}
	if ok, err := c.Pending(t.Context(), id); !ok || err != nil {
		t.Errorf("Pending(%s) = %v, %v", id, ok, err)
	}
	if _, err := c.Submit(t.Context(), &jobs.Job{Image: "python"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Submit(t.Context(), &jobs.Job{Image: "python"})
	if !errors.Is(err, jobs.ErrQueueFull) {
		t.Fatalf("third job: %v, want ErrQueueFull", err)
	}
}

// A job submitted again once the duplicate window has passed, while the
// first is still queued (or running: its message stays until the ack), is
// not queued a second time: Submit returns its ID, the stream still holds
// one message, and a full queue still says ErrQueueFull to a new job.
func TestSubmitPastTheWindowWhileQueued(t *testing.T) {
	t.Parallel()
	c, js := setup(t, fleet.Topology{MaxMsgs: 2, DuplicateWindow: 100 * time.Millisecond})
	job := &jobs.Job{ID: "again", Image: "python", Code: "print(1)"}
	if _, err := c.Submit(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // past the window: only the stream's limit can tell
	for i := range 3 {
		if id, err := c.Submit(t.Context(), job); err != nil || id != "again" {
			t.Fatalf("submit %d past the window: %q, %v; want the job's ID, no error", i+2, id, err)
		}
	}
	info, _ := natstest.Stores(t, js).Stream.Info(t.Context())
	if info.State.Msgs != 1 {
		t.Errorf("stream holds %d messages, want 1: the job would run %d times", info.State.Msgs, info.State.Msgs)
	}
	if _, err := c.Submit(t.Context(), &jobs.Job{Image: "python"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(t.Context(), &jobs.Job{Image: "python"}); !errors.Is(err, jobs.ErrQueueFull) {
		t.Fatalf("a new job on a full queue: %v, want ErrQueueFull", err)
	}
	if _, err := c.Submit(t.Context(), job); err != nil {
		t.Fatalf("the queued job again on a full queue: %v, want no error", err)
	}
}

// SubmitWhenRoom waits while the queue is full and publishes once there is
// room; with no room before its context ends it returns ErrQueueFull.
func TestSubmitWhenRoom(t *testing.T) {
	t.Parallel()
	c, js := setup(t, fleet.Topology{MaxMsgs: 1})
	if _, err := c.Submit(t.Context(), &jobs.Job{ID: "first", Image: "python"}); err != nil {
		t.Fatal(err)
	}

	// Long enough for the server to say "full" at least once on a loaded
	// machine (a wait that ends before any answer is the deadline's error).
	short, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if _, err := c.SubmitWhenRoom(short, &jobs.Job{Image: "python"}, time.Millisecond, time.Millisecond); !errors.Is(err, jobs.ErrQueueFull) {
		t.Fatalf("no room before the deadline: %v, want ErrQueueFull", err)
	}

	// Each try is a publish on the client's connection, the only one
	// publishing now.
	tries := func() uint64 { return js.Conn().Stats().OutMsgs }
	before := tries()
	type outcome struct {
		id  string
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		id, err := c.SubmitWhenRoom(t.Context(), &jobs.Job{ID: "second", Image: "python"}, time.Millisecond, time.Millisecond)
		done <- outcome{id, err}
	}()
	testutil.Eventually(t, 10*time.Second, "SubmitWhenRoom retrying while the queue is full", func() bool { return tries() >= before+3 })
	select {
	case o := <-done:
		t.Fatalf("SubmitWhenRoom returned %+v while the queue was full", o)
	default:
	}
	if err := natstest.Stores(t, js).Stream.DeleteMsg(t.Context(), 1); err != nil { // a worker took "first"
		t.Fatal(err)
	}
	if o := <-done; o.err != nil || o.id != "second" {
		t.Fatalf("after room was made: %+v", o)
	}
	if ok, _ := c.Pending(t.Context(), "second"); !ok {
		t.Error("the job published after the wait is not queued")
	}
}

func TestSubmitRefusesInvalid(t *testing.T) {
	t.Parallel()
	c, _ := setup(t, fleet.Topology{MaxJobBytes: 1024})
	for _, j := range []*jobs.Job{
		{ID: "bad id", Image: "python"},
		{Image: ""},
		{Image: "python", Code: strings.Repeat("x", 2000)},
	} {
		if _, err := c.Submit(t.Context(), j); !errors.Is(err, jobs.ErrInvalidJob) {
			t.Errorf("Submit(%.40v): %v, want ErrInvalidJob", j, err)
		}
	}
}

// FuzzDecode: Decode never panics, only returns ErrInvalidJob errors, and
// a job it accepts and Validate passes survives an encode/decode round trip.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"id":"eval-42","image":"python","code":"print(6*7)"}`,
		`{"image":"python","limits":{"timeout":"30s","memory":"512m","cpus":1,"pids":64,"network":false,"output":"1m","tmpfs":"64m"}}`,
		`{"image":"shell","files":{"a/b.txt":"x"},"env":{"K":"V"},"argv":["sh","main.sh"],"reply_to":"agent.7.results","labels":{"a":"b"}}`,
		`{"image":"python"} {}`, `{"limits":{"memory":-1}}`, `[]`, `null`, ``, `{"id":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := jobs.Decode(data, 1<<16)
		if err != nil {
			if !errors.Is(err, jobs.ErrInvalidJob) {
				t.Fatalf("error does not wrap ErrInvalidJob: %v", err)
			}
			return
		}
		j.Normalize()
		if j.Validate() != nil {
			return
		}
		again, data2, err := jobs.Encode(j, 1<<20)
		if err != nil {
			t.Fatalf("Encode of a valid job: %v", err)
		}
		j2, err := jobs.Decode(data2, 1<<20)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", data2, err)
		}
		a, _ := json.Marshal(again)
		b, _ := json.Marshal(j2)
		if !bytes.Equal(a, b) {
			t.Fatalf("round trip changed the job:\n%s\n%s", a, b)
		}
	})
}

// Jobs at the edges of the fleet's defaults (a job of up to MaxJobBytes):
// each is refused with ErrInvalidJob naming its field, never taken.
func TestDecodeRefusesEdges(t *testing.T) {
	t.Parallel()
	many := func(n int, prefix, value string) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"%s%d":%q`, prefix, i, value)
		}
		return b.String()
	}
	exact := `{"image":"python","code":"`
	exact += strings.Repeat("x", jobs.MaxJobBytes-len(exact)-2) + `"}`
	tests := []struct {
		name, body, want string
	}{
		{"ten thousand files", `{"image":"python","files":{` + many(10000, "f", "") + `}}`, "files: 10000 files, over the limit of 1000"},
		{"env value over 128 KiB", `{"image":"python","env":{"K":"` + strings.Repeat("v", 128<<10+1) + `"}}`, `env["K"]: the value is 131073 bytes`},
		{"env name over 256 bytes", `{"image":"python","env":{"` + strings.Repeat("N", 257) + `":"v"}}`, "the name is 257 bytes"},
		{"label key over 128 bytes", `{"image":"python","labels":{"` + strings.Repeat("k", 129) + `":"v"}}`, "labels["},
		{"one byte over the cap", exact[:len(exact)-2] + `x"}`, fmt.Sprintf("job is %d bytes, over the cap of %d", jobs.MaxJobBytes+1, jobs.MaxJobBytes)},
		{"invalid UTF-8 in code", "{\"image\":\"python\",\"code\":\"\xff\xfe\"}", "code"},
		{"invalid UTF-8 in stdin", "{\"image\":\"python\",\"code\":\"x\",\"stdin\":\"a\xc3\"}", "stdin"},
		{"reply_to of >", `{"image":"python","code":"x","reply_to":">"}`, "reply_to"},
		{"reply_to into the JetStream API", `{"image":"python","code":"x","reply_to":"$JS.API.STREAM.DELETE.JOBS"}`, "reply_to"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j, err := jobs.Decode([]byte(tc.body), 0)
			if err == nil {
				j.Normalize()
				err = j.Validate()
			}
			if !errors.Is(err, jobs.ErrInvalidJob) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want ErrInvalidJob naming %q", err, tc.want)
			}
		})
	}
	// Exactly the cap is a job.
	j, err := jobs.Decode([]byte(exact), 0)
	if err == nil {
		j.Normalize()
		err = j.Validate()
	}
	if err != nil {
		t.Errorf("a job of exactly %d bytes: %v", jobs.MaxJobBytes, err)
	}
}

// Tenants publish into CANCELS and WORKSPACES, each on its own keys'
// subjects: a Nats-Rollup: all header on such a publish would purge every
// tenant's keys. Both buckets refuse rollups, also when an older version
// made them with rollups on, and keep the other keys.
func TestTenantWritableBucketsRefuseRollups(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	// As nats.go makes a bucket: rollups on.
	if _, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: fleet.CancelsBucket}); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.NewClient(t.Context(), js, jobs.Config{}); err != nil {
		t.Fatal(err)
	}
	for _, bucket := range []string{fleet.CancelsBucket, fleet.WorkspacesBucket} {
		kv, err := js.KeyValue(t.Context(), bucket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(t.Context(), "team-b.keep", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg("$KV." + bucket + ".team-a.x")
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
		m.Data = []byte(`{}`)
		if _, err := js.PublishMsg(t.Context(), m); err == nil {
			t.Errorf("%s took a rollup of all", bucket)
		}
		if _, err := kv.Get(t.Context(), "team-b.keep"); err != nil {
			t.Errorf("%s: another tenant's key after the rollup: %v", bucket, err)
		}
		s, err := js.Stream(t.Context(), "KV_"+bucket)
		if err != nil {
			t.Fatal(err)
		}
		if s.CachedInfo().Config.AllowRollup {
			t.Errorf("%s allows rollups", bucket)
		}
	}
}

// A client that finds the topology missing while a worker sets it up (the
// gateway beside an embedded worker does) makes what is missing with its
// defaults, and leaves what the worker made as the worker set it, whoever
// got there first.
func TestOpenLeavesTheWorkersSettings(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	worker := fleet.Topology{EventsMaxAge: 10 * time.Minute, WorkspaceTTL: 2 * time.Hour, ResultTTL: 3 * time.Hour, MaxMsgs: 10}
	if _, err := worker.Ensure(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	// The client looks before the worker made JOBS, and so makes the rest.
	if err := js.DeleteStream(t.Context(), fleet.StreamName); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.NewClient(t.Context(), js, jobs.Config{}); err != nil {
		t.Fatal(err)
	}
	for stream, want := range map[string]time.Duration{
		fleet.EventsStreamName:         10 * time.Minute,
		fleet.IndexStreamName:          3 * time.Hour,
		"KV_" + fleet.ResultsBucket:    3 * time.Hour,
		"KV_" + fleet.CancelsBucket:    3 * time.Hour,
		"KV_" + fleet.WorkspacesBucket: 2 * time.Hour,
		"OBJ_" + fleet.SnapshotsBucket: 2*time.Hour + 30*time.Minute, // SnapshotTTL
		"OBJ_" + fleet.ArtifactsBucket: 3 * time.Hour,
		fleet.StreamName:               0, // made by the client
	} {
		s, err := js.Stream(t.Context(), stream)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config.MaxAge; got != want {
			t.Errorf("%s keeps %s, want %s", stream, got, want)
		}
	}
	// The worker, setting up after the client, has its way.
	if _, err := worker.Ensure(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), fleet.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxMsgs; got != 10 {
		t.Errorf("JOBS holds %d jobs after the worker's set-up, want 10", got)
	}
}
