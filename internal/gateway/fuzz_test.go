package gateway

import (
	"errors"
	"testing"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// FuzzDecodeJob: whatever a client sends as a job body, decodeJob answers
// with a job that encodes, or an error classify maps to a 400 (never a
// panic, never a 500).
func FuzzDecodeJob(f *testing.F) {
	for _, s := range []string{
		`{"image":"python","code":"print(1)"}`,
		`{"image":"python","code":"x","bogus":1}`,
		`{"image":"python","limits":{"timeout":"30s","memory":"1g"}}`,
		`{"image":"python","files":{"a.py":"x"},"env":{"K":"V"},"labels":{"k":"v"}}`,
		`[]`, `null`, `{`, `{"image":"python"} {}`, "{\"code\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	g := &Gateway{}
	f.Fuzz(func(t *testing.T, data []byte) {
		job, err := decodeJob(data)
		if err != nil {
			var ae *Error
			if !errors.As(err, &ae) && !errors.Is(err, jobs.ErrInvalidJob) {
				t.Fatalf("error %v is neither an API error nor an invalid job", err)
			}
			if e := g.classify(err); e.Status != 400 {
				t.Fatalf("error %v answers %d, want 400", err, e.Status)
			}
			return
		}
		if job == nil {
			t.Fatal("no job and no error")
		}
	})
}
