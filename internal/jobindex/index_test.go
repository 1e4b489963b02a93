package jobindex_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/jobindex"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// setup starts an in-process server with the fleet's streams (INDEX among
// them) and returns a connection to it.
func setup(t *testing.T) jetstream.JetStream {
	t.Helper()
	_, js := natstest.Connect(t, natstest.Server(t).ClientURL())
	if _, err := (fleet.Topology{}).Open(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	return js
}

// publishRecord appends a record to INDEX as a worker does.
func publishRecord(t testing.TB, js jetstream.JetStream, subject string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), subject, data); err != nil {
		t.Fatal(err)
	}
}

func ids(page *jobindex.Page) string {
	var s []string
	for _, j := range page.Jobs {
		s = append(s, j.ID)
	}
	return strings.Join(s, " ")
}

func TestIndexList(t *testing.T) {
	t.Parallel()
	js := setup(t)
	// j0..j9: even ones on queue a, odd on b; j3 and j4 in batch nightly;
	// every job running, then j0..j4 finished (their records move up).
	for i := range 10 {
		job := &jobs.Job{ID: fmt.Sprintf("j%d", i), Queue: "a", Image: "python"}
		if i%2 == 1 {
			job.Queue = "b"
		}
		if i == 3 || i == 4 {
			job.Labels = map[string]string{jobs.BatchLabel: "nightly", "k": "v"}
		}
		s := records.RunningSummary(job, "w1", 1, nil)
		publishRecord(t, js, s.Subject(), s)
	}
	for i := range 5 {
		job := &jobs.Job{ID: fmt.Sprintf("j%d", i), Queue: "a"}
		if i%2 == 1 {
			job.Queue = "b"
		}
		if i == 3 || i == 4 {
			job.Labels = map[string]string{jobs.BatchLabel: "nightly", "k": "v"}
		}
		status := jobs.StatusSucceeded
		if i == 2 {
			status = jobs.StatusFailed
		}
		s := records.FinishedSummary(job.Queue, job, &jobs.Result{ID: job.ID, Status: status, Labels: job.Labels})
		publishRecord(t, js, s.Subject(), s)
	}
	publishRecord(t, js, fleet.IndexSpecSubject("j1"), records.NewJobSpec(&jobs.Job{ID: "j1", Code: "print(1)"}))
	idx, err := jobindex.Open(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	failed := func(s *records.Summary) bool { return s.Status == jobs.StatusFailed }
	for _, tc := range []struct {
		name string
		q    jobindex.Query
		want string
	}{
		{"all, newest first, once each", jobindex.Query{}, "j4 j3 j2 j1 j0 j9 j8 j7 j6 j5"},
		{"a queue", jobindex.Query{Queue: "b"}, "j3 j1 j9 j7 j5"},
		{"a batch", jobindex.Query{Batch: "nightly"}, "j4 j3"},
		{"outside batches", jobindex.Query{Batch: records.NoBatch, Queue: "a"}, "j2 j0 j8 j6"},
		{"a match", jobindex.Query{Match: failed}, "j2"},
		{"a limit", jobindex.Query{Limit: 3}, "j4 j3 j2"},
	} {
		page, err := idx.List(t.Context(), tc.q)
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(page); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}

	// Pages: Next is the Before of the next one, 0 after the last.
	var all []string
	before := uint64(0)
	for range 10 {
		page, err := idx.List(t.Context(), jobindex.Query{Limit: 4, Before: before})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ids(page))
		if page.Next == 0 {
			break
		}
		before = page.Next
	}
	if got := strings.Join(all, " | "); got != "j4 j3 j2 j1 | j0 j9 j8 j7 | j6 j5" {
		t.Errorf("pages %q", got)
	}

	// The scan bound ends a page early and says where to go on.
	page, err := idx.List(t.Context(), jobindex.Query{Match: func(s *records.Summary) bool { return s.ID == "j5" }, MaxScan: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Jobs) != 0 || !page.Cut || page.Next == 0 || page.Scanned != 4 {
		t.Errorf("bounded scan: %q cut %v next %d scanned %d", ids(page), page.Cut, page.Next, page.Scanned)
	}

	s, err := idx.Summary(t.Context(), "j3")
	if err != nil || s.State != records.Finished || s.Batch() != "nightly" || s.Labels["k"] != "v" {
		t.Errorf("summary j3: %+v, %v", s, err)
	}
	if _, err := idx.Summary(t.Context(), "nope"); !errors.Is(err, jobs.ErrNotFound) {
		t.Errorf("unknown: %v", err)
	}
	spec, err := idx.Spec(t.Context(), "j1")
	if err != nil || spec.Code != "print(1)" {
		t.Errorf("spec j1: %+v, %v", spec, err)
	}

	var scanned []string
	n, cut, err := idx.Scan(t.Context(), "nightly", 100, func(s *records.Summary) bool {
		scanned = append(scanned, s.ID+":"+string(s.Status))
		return true
	})
	if err != nil || n != 2 || cut || strings.Join(scanned, " ") != "j3:succeeded j4:succeeded" {
		t.Errorf("scan: %v %d %v %v", scanned, n, cut, err)
	}
	if n, cut, _ := idx.Scan(t.Context(), records.NoBatch, 3, func(*records.Summary) bool { return true }); n != 3 || !cut {
		t.Errorf("bounded scan: %d %v", n, cut)
	}
}

// A window larger than one batch answer, and tenants' IDs (two tokens).
func TestIndexManyAndTenants(t *testing.T) {
	t.Parallel()
	js := setup(t)
	const n = 3000
	for i := range n {
		job := &jobs.Job{ID: fmt.Sprintf("acme.j%04d", i), Queue: "default", Image: "python"}
		s := records.RunningSummary(job, "w1", 1, nil)
		publishRecord(t, js, s.Subject(), s)
		if i%1000 == 0 {
			publishRecord(t, js, fleet.IndexDeadSubject(job.ID), s)
		}
	}
	idx, err := jobindex.Open(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	page, err := idx.List(t.Context(), jobindex.Query{Match: func(s *records.Summary) bool { return s.ID == "acme.j0007" }})
	if err != nil || ids(page) != "acme.j0007" || page.Cut || page.Next != 0 {
		t.Fatalf("found %q cut %v next %d: %v", ids(page), page.Cut, page.Next, err)
	}
	if s, err := idx.Summary(t.Context(), "acme.j2999"); err != nil || s.ID != "acme.j2999" {
		t.Errorf("tenant's summary: %+v %v", s, err)
	}
	dead, total, err := idx.DeadLetters(t.Context(), 2)
	if err != nil || total != 3 || len(dead) != 2 || dead[0].ID != "acme.j2000" {
		t.Errorf("dead letters %d %v: %v", total, dead, err)
	}
}

func TestJobSpecCaps(t *testing.T) {
	t.Parallel()
	job := &jobs.Job{ID: "x", Code: strings.Repeat("é", records.SpecMaxCode), Stdin: "secret",
		Env: map[string]string{"TOKEN": "hunter2", "A": "1"}, Files: map[string]string{}}
	for i := range 10 {
		job.Files[fmt.Sprintf("f%d", i)] = strings.Repeat("x", 3000)
	}
	s := records.NewJobSpec(job)
	if !s.CodeCut() || len(s.Code) > records.SpecMaxCode || !strings.HasPrefix(job.Code, s.Code) {
		t.Errorf("code %d bytes of %d", len(s.Code), s.CodeBytes)
	}
	total := 0
	for _, f := range s.Files {
		total += len(f.Text)
	}
	if total > records.SpecMaxFilesText || len(s.Files) != 10 || !s.Files[9].Cut() {
		t.Errorf("files: %d bytes kept", total)
	}
	data, _ := json.Marshal(s)
	if strings.Contains(string(data), "hunter2") || strings.Contains(string(data), "secret") {
		t.Errorf("the spec keeps env values or stdin: %s", data)
	}
	if strings.Join(s.Env, ",") != "A,TOKEN" || s.StdinBytes != 6 {
		t.Errorf("env %v stdin %d", s.Env, s.StdinBytes)
	}
}
