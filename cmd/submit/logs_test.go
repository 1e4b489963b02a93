package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// liveBuffer is a writer a test reads while submit writes to it.
type liveBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *liveBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *liveBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// started is submit running in the background.
type started struct {
	stdout, stderr *liveBuffer
	code           chan int
	cancel         context.CancelFunc
}

func startSubmit(t *testing.T, url string, args ...string) *started {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	s := &started{stdout: &liveBuffer{}, stderr: &liveBuffer{}, code: make(chan int, 1), cancel: cancel}
	go func() {
		defer cancel()
		s.code <- runCLI(ctx, append(args, "--nats", url), strings.NewReader(""), s.stdout, s.stderr)
	}()
	return s
}

func (s *started) wait(t *testing.T) int {
	t.Helper()
	select {
	case c := <-s.code:
		return c
	case <-time.After(60 * time.Second):
		t.Fatal("submit did not end")
		return 0
	}
}

// until polls until cond holds.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, what, cond)
}

// submit run prints the job's output while it runs, stdout to stdout and
// stderr to stderr, and exits as the job; so do logs -f started mid-job
// (from the start) and logs after the end. Without -f, logs of a running
// job shows what there is so far and exits 75.
func TestRunLiveAndLogs(t *testing.T) {
	t.Parallel()
	url := setup(t, false)
	release := filepath.Join(t.TempDir(), "release")
	code := "print first\neprint warning\nwaitfile " + release + "\nprint second\nexit 3"
	run := startSubmit(t, url, "run", "--id", "live-1", "-c", code)
	until(t, "the first line, live", func() bool { return run.stdout.String() == "first\n" && run.stderr.String() == "warning\n" })

	if got := submit(t, url, "", "logs", "live-1"); got.code != 75 || got.stdout != "first\n" || !strings.Contains(got.stderr, "warning\n") ||
		!strings.Contains(got.stderr, "queued or running") {
		t.Errorf("logs of a running job: %+v", got)
	}
	follow := startSubmit(t, url, "logs", "-f", "live-1")
	until(t, "logs -f replays the start", func() bool { return follow.stdout.String() == "first\n" })
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*started{"run": run, "logs -f": follow} {
		if code := s.wait(t); code != 3 || s.stdout.String() != "first\nsecond\n" || s.stderr.String() != "warning\n" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", name, code, s.stdout, s.stderr)
		}
	}
	for _, args := range [][]string{{"logs", "live-1"}, {"logs", "-f", "live-1"}} {
		if got := submit(t, url, "", args...); got.code != 3 || got.stdout != "first\nsecond\n" || got.stderr != "warning\n" {
			t.Errorf("%s after the end: %+v", args, got)
		}
	}

	got := submit(t, url, "", "logs", "live-1", "--json")
	var types []string
	var last jobs.Event
	for line := range strings.Lines(got.stdout) {
		if err := json.Unmarshal([]byte(line), &last); err != nil {
			t.Fatalf("logs --json line %q: %v", line, err)
		}
		types = append(types, string(last.Type))
	}
	if got.code != 3 || strings.Join(types, " ") != "queued started output output output finished" ||
		last.Result == nil || last.Result.Stdout != "first\nsecond\n" {
		t.Errorf("logs --json: exit %d, events %q, last %+v", got.code, types, last)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"logs", "no-such-job"}, 1, "no job no-such-job"},
		{[]string{"logs", "-f", "no-such-job"}, 1, "no job no-such-job"},
		{[]string{"logs"}, 2, "one job ID"},
	} {
		if got := submit(t, url, "", tc.args...); got.code != tc.code || !strings.Contains(got.stderr, tc.want) {
			t.Errorf("%s: %+v", tc.args, got)
		}
	}
}

// Ctrl-C detaches from run and logs -f without canceling the job.
func TestRunDetachesOnInterrupt(t *testing.T) {
	t.Parallel()
	url := setup(t, false)
	release := filepath.Join(t.TempDir(), "release")
	run := startSubmit(t, url, "run", "--id", "detach-1", "-c", "print up\nwaitfile "+release+"\nprint done")
	until(t, "output", func() bool { return run.stdout.String() == "up\n" })
	run.cancel()
	if code := run.wait(t); code != 130 || !strings.Contains(run.stderr.String(), "submit logs -f detach-1") {
		t.Fatalf("interrupted run: exit %d, stderr %q", code, run.stderr)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := submit(t, url, "", "logs", "-f", "detach-1"); got.code != 0 || got.stdout != "up\ndone\n" {
		t.Errorf("the job went on: %+v", got)
	}
}

// The printer: a character cut between two events is shown whole on a
// terminal; a redelivery says so and the new attempt's output follows; a
// gap says what is missing, and the result fills in nothing after it;
// without any event the result's output is printed whole.
func TestPrinter(t *testing.T) {
	t.Parallel()
	ev := func(typ jobs.EventType, attempt int, s jobs.Stream, off int64, data string) *jobs.Event {
		e := &jobs.Event{Type: typ, ID: "p", Attempt: attempt, Stream: s, Offset: off}
		e.SetData([]byte(data))
		return e
	}
	euro := "€"
	for _, tc := range []struct {
		name           string
		tty            bool
		events         []*jobs.Event
		res            *jobs.Result
		stdout, stderr string
	}{
		{"character cut on a terminal", true, []*jobs.Event{
			ev(jobs.EventStarted, 1, "", 0, ""),
			ev(jobs.EventOutput, 1, jobs.Stdout, 0, "a"+euro[:1]),
			ev(jobs.EventOutput, 1, jobs.Stdout, 2, euro[1:]+"\x1b\n"),
		}, &jobs.Result{Status: jobs.StatusSucceeded, Attempt: 1, Stdout: "a€\x1b\n"}, "a€^[\n", ""},
		{"redelivered", false, []*jobs.Event{
			ev(jobs.EventStarted, 1, "", 0, ""),
			ev(jobs.EventOutput, 1, jobs.Stdout, 0, "one\n"),
			ev(jobs.EventRedelivered, 2, "", 0, ""),
			ev(jobs.EventStarted, 2, "", 0, ""),
			ev(jobs.EventOutput, 2, jobs.Stdout, 0, "one\n"),
		}, &jobs.Result{Status: jobs.StatusSucceeded, Attempt: 2, Stdout: "one\ntwo\n"}, "one\none\ntwo\n",
			"submit: job p: attempt 2: redelivered (its worker was lost or stopped); its output starts again from the start\n"},
		{"gap", false, []*jobs.Event{
			ev(jobs.EventOutput, 1, jobs.Stderr, 0, "ab"),
			{Type: jobs.EventGap, Attempt: 1, Stream: jobs.Stderr, Offset: 2, Bytes: 3},
			ev(jobs.EventOutput, 1, jobs.Stderr, 5, "f"),
		}, &jobs.Result{Status: jobs.StatusSucceeded, Attempt: 1, Stderr: "abcdefgh"}, "",
			"ab" + "submit: job p: 3 bytes of stderr not shown: the stream fell behind (submit get p has them)\n" + "f"},
		{"no events", false, nil, &jobs.Result{ID: "p", Status: jobs.StatusTimeout, Attempt: 1, Stdout: "all\n", Error: "killed"}, "all\n",
			"submit: job p: timeout: killed\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			m := &Main{Stdout: &stdout, Stderr: &stderr, IsTerminal: func(io.Writer) bool { return tc.tty }}
			o := &output{m: m}
			p := o.newPrinter("p")
			for _, e := range tc.events {
				p.event(e)
			}
			p.finished(tc.res)
			if stdout.String() != tc.stdout || stderr.String() != tc.stderr {
				t.Errorf("stdout %q, stderr %q\nwant   %q, %q", stdout.String(), stderr.String(), tc.stdout, tc.stderr)
			}
		})
	}
}

func TestIncompleteTail(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]int{"": 0, "abc": 0, "a€": 0, "a\xe2": 1, "a\xe2\x82": 2, "\xf0\x9f\x98": 3, "\xff": 0, "a\x82": 0} {
		if got := incompleteTail([]byte(s)); got != want {
			t.Errorf("incompleteTail(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestLogsHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"logs", "--help"}, {"help", "logs"}, {"--help"}} {
		var o, e bytes.Buffer
		code := runCLI(t.Context(), args, strings.NewReader(""), &o, &e)
		if code != 0 || !strings.Contains(o.String(), "logs ID [-f] [--json]") {
			t.Errorf("%q: exit %d:\n%s", args, code, o.String())
		}
		if args[0] != "--help" && !strings.Contains(o.String(), "-f, --follow") {
			t.Errorf("%q lacks -f:\n%s", args, o.String())
		}
	}
}

// On a fleet whose permissions predate job events (the submitter may not
// read EVENTS), run says so and prints the output from the result, with
// the same exit code.
func TestRunWithoutEventsPermission(t *testing.T) {
	t.Parallel()
	s := natstest.ServerWith(t, &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		Users: []*server.User{
			{Username: "admin", Password: "a"},
			{Username: "old", Password: "o", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.STREAM.INFO.EVENTS", "$JS.API.STREAM.MSG.GET.EVENTS", "$JS.API.CONSUMER.CREATE.EVENTS.>", "events.>"}},
			}},
		},
	})
	_, js := natstest.Connect(t, s.ClientURL(), nats.UserInfo("admin", "a"))
	workertest.Start(t, js, &fakeexec.Executor{}, worker.Config{ID: "test", Slots: 1})
	url := "nats://old:o@" + strings.TrimPrefix(s.ClientURL(), "nats://")
	got := submit(t, url, "", "run", "-c", "print from the result\nexit 4")
	if got.code != 4 || got.stdout != "from the result\n" || !strings.Contains(got.stderr, "live output unavailable") {
		t.Errorf("run without EVENTS: %+v", got)
	}
}
