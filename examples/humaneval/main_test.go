package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

func TestRun(t *testing.T) {
	t.Parallel()
	in := filepath.Join("..", "problems", "problems.jsonl")
	for _, tc := range []struct {
		args   []string
		prefix string
		code   string // in every job's code
	}{
		{nil, "sandfleet-", "check("},
		{[]string{"-broken"}, "sandfleet-broken-", "    return None\n"},
		{[]string{"-prefix", "ex-"}, "ex-", "check("},
	} {
		var out bytes.Buffer
		if err := run(append([]string{"-in", in}, tc.args...), &out, io.Discard); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		sc := bufio.NewScanner(&out)
		sc.Buffer(nil, 1<<20)
		n := 0
		for sc.Scan() {
			job, err := jobs.Decode(sc.Bytes(), 0)
			if err != nil {
				t.Fatalf("%v: line %d: %v", tc.args, n+1, err)
			}
			job.Normalize()
			if err := job.Validate(); err != nil || !strings.HasPrefix(job.ID, tc.prefix) || !strings.Contains(job.Code, tc.code) || job.Image != "python" {
				t.Errorf("%v: job %+v: %v", tc.args, job, err)
			}
			n++
		}
		if n != 12 {
			t.Errorf("%v: %d jobs, want 12", tc.args, n)
		}
	}
}

func TestRunNeedsInput(t *testing.T) {
	t.Parallel()
	if err := run(nil, io.Discard, io.Discard); !errors.Is(err, errNoInput) {
		t.Fatalf("no -in: %v, want errNoInput", err)
	}
}
