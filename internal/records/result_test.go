package records

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

func TestOutputKeepsBytes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		out      []byte
		encoding string
	}{
		{"text", []byte("héllo\n"), ""},
		{"empty", nil, ""},
		{"invalid utf-8", []byte{0xff, 0xfe, 0, 'a', '\n'}, jobs.EncodingBase64},
		{"cut rune", []byte("é")[:1], jobs.EncodingBase64},
		{"escape sequences are valid text", []byte("\x1b[2J\x1b]0;t\x07"), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &jobs.Result{ID: "x", Status: jobs.StatusSucceeded}
			r.SetOutput(tc.out, tc.out)
			if r.StdoutEncoding != tc.encoding || r.StderrEncoding != tc.encoding {
				t.Fatalf("encodings %q %q, want %q", r.StdoutEncoding, r.StderrEncoding, tc.encoding)
			}
			data, err := EncodeResult(r, 0)
			if err != nil {
				t.Fatal(err)
			}
			var back jobs.Result
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back.StdoutBytes(), tc.out) || !bytes.Equal(back.StderrBytes(), tc.out) {
				t.Fatalf("round trip: %q / %q, want %q", back.StdoutBytes(), back.StderrBytes(), tc.out)
			}
		})
	}
}

func TestEncodeResultShortensBase64Whole(t *testing.T) {
	t.Parallel()
	r := &jobs.Result{ID: "x", Status: jobs.StatusSucceeded}
	r.SetOutput(bytes.Repeat([]byte{0xff, 0x00, 0x41}, 10000), []byte(strings.Repeat("<", 10000)))
	data, err := EncodeResult(r, 16<<10)
	if err != nil {
		t.Fatal(err)
	}
	var back jobs.Result
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if len(data) > 16<<10 || !back.StdoutTruncated || len(back.Stdout)%4 != 0 {
		t.Fatalf("%d bytes, truncated %v, base64 of %d chars", len(data), back.StdoutTruncated, len(back.Stdout))
	}
	if got := back.StdoutBytes(); len(got) == 0 || !bytes.HasPrefix(bytes.Repeat([]byte{0xff, 0x00, 0x41}, 10000), got) {
		t.Fatalf("shortened stdout does not decode to a prefix of the output: %d bytes", len(got))
	}
}

// A judged result of a thousand failing cases, each with its KiB of stderr
// (escaped six-fold in JSON) and a diff, fits the server's payload once
// its cases' texts are shortened, and keeps every case's verdict.
func TestEncodeResultShortensCases(t *testing.T) {
	r := &jobs.Result{ID: "j", Status: jobs.StatusFailed, Tests: &jobs.TestReport{Total: 1000, Failed: 1000},
		Compile: &jobs.CompileReport{Output: strings.Repeat("warning\n", 10_000)}}
	for i := range 1000 {
		r.Tests.Cases = append(r.Tests.Cases, jobs.CaseResult{Index: i, Verdict: "runtime_error",
			Stderr: strings.Repeat("<", 1024), Diff: &jobs.Diff{Line: 1, Expected: strings.Repeat("e", 200), Actual: strings.Repeat("\x01", 200)}})
	}
	const max = 1 << 20
	data, err := EncodeResult(r, max)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > max {
		t.Fatalf("%d bytes, over %d", len(data), max)
	}
	var got jobs.Result
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Tests == nil || len(got.Tests.Cases) != 1000 || got.Tests.Cases[999].Verdict != "runtime_error" || !got.Compile.OutputTruncated {
		t.Fatalf("cases or the compile step lost: %+v", got.Tests != nil)
	}
	if s := got.Tests.Cases[0].Stderr; s == "" || !strings.HasPrefix(strings.Repeat("<", 1024), s) {
		t.Fatalf("case 0's stderr %q: want a non-empty prefix of what it wrote", s)
	}
}

// A result whose display outputs do not fit the server's payload drops
// them, the last first, counting them, before it cuts a byte of stdout.
func TestEncodeResultDropsDisplaysFirst(t *testing.T) {
	t.Parallel()
	r := &jobs.Result{ID: "d", Status: jobs.StatusSucceeded}
	r.SetOutput([]byte("hello\n"), nil)
	for range 4 {
		r.Display = append(r.Display, jobs.Display{MIME: "image/png", Data: strings.Repeat("A", 100<<10), Width: 1, Height: 1})
	}
	data, err := EncodeResult(r, 250<<10)
	if err != nil {
		t.Fatal(err)
	}
	var back jobs.Result
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Display) != 2 || back.DisplayDropped != 2 || back.Stdout != "hello\n" || back.StdoutTruncated {
		t.Fatalf("%d displays, %d dropped, stdout %q (truncated %v): want 2, 2 and all of it",
			len(back.Display), back.DisplayDropped, back.Stdout, back.StdoutTruncated)
	}
}

// Whatever a result carries is cut to fit, with the cut said, and the
// verdict stays: a result that cannot be stored makes its job run again.
func TestEncodeResultCutsEveryList(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 4<<10)
	exit := 1
	cases := []struct {
		name  string
		fill  func(r *jobs.Result)
		field string
		check func(r *jobs.Result) bool
	}{
		{"egress", func(r *jobs.Result) {
			for i := range 400 {
				r.Egress = append(r.Egress, limits.NetworkUse{Host: fmt.Sprint(i, big), Reason: big})
			}
		}, "egress", func(r *jobs.Result) bool { return len(r.Egress) > 0 && len(r.Egress) < 400 }},
		{"artifacts", func(r *jobs.Result) {
			for i := range 2000 {
				r.Artifacts = append(r.Artifacts, jobs.Artifact{Name: fmt.Sprint(i, big[:1000]), Key: big[:200]})
			}
		}, "artifacts", func(r *jobs.Result) bool { return len(r.Artifacts) > 0 && len(r.Artifacts) < 2000 }},
		{"artifacts skipped", func(r *jobs.Result) {
			for i := range 2000 {
				r.ArtifactsSkipped = append(r.ArtifactsSkipped, jobs.SkippedArtifact{Name: fmt.Sprint(i, big[:1000]), Reason: "too large"})
			}
		}, "artifacts_skipped", func(r *jobs.Result) bool { return len(r.ArtifactsSkipped) < 2000 }},
		{"workspace skipped", func(r *jobs.Result) {
			r.Workspace = &jobs.WorkspaceStep{Name: "w", Revision: 3}
			for i := range 2000 {
				r.Workspace.Skipped = append(r.Workspace.Skipped, jobs.SkippedEntry{Name: fmt.Sprint(i, big[:1000]), Reason: "fifo"})
			}
		}, "workspace.skipped", func(r *jobs.Result) bool {
			return r.Workspace.Revision == 3 && len(r.Workspace.Skipped)+r.Workspace.SkippedMore == 2000
		}},
		{"an error past everything", func(r *jobs.Result) { r.Error = strings.Repeat(big, 1000) }, "result",
			func(r *jobs.Result) bool { return len(r.Error) <= 4<<10 && r.Status == jobs.StatusFailed }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &jobs.Result{ID: "j", Status: jobs.StatusFailed, Exit: &exit}
			r.SetOutput([]byte("out\n"), nil)
			tc.fill(r)
			const max = 1 << 20
			data, err := EncodeResult(r, max)
			if err != nil {
				t.Fatal(err)
			}
			var back jobs.Result
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			if len(data) > max || back.Status != jobs.StatusFailed || back.ExitCode() != 1 {
				t.Fatalf("%d bytes (max %d), status %s exit %d", len(data), max, back.Status, back.ExitCode())
			}
			if len(back.Cut) == 0 || !strings.HasPrefix(back.Cut[len(back.Cut)-1], tc.field+": ") || !tc.check(&back) {
				t.Fatalf("cut %q: want a line about %s, and what it keeps", back.Cut, tc.field)
			}
			if tc.field != "result" && back.Stdout != "out\n" {
				t.Fatalf("stdout %q: the lists go before any output", back.Stdout)
			}
		})
	}
}
