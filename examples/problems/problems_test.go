package problems_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/examples/problems"
)

func TestExamples(t *testing.T) {
	t.Parallel()
	ps := problems.Examples()
	if len(ps) != 12 {
		t.Fatalf("%d problems, want 12", len(ps))
	}
	seen := map[string]bool{}
	for _, p := range ps {
		if seen[p.TaskID] || seen[p.Name()] {
			t.Errorf("%s: task ID or name used twice", p.TaskID)
		}
		seen[p.TaskID], seen[p.Name()] = true, true
		if !strings.Contains(p.Prompt, "def "+p.EntryPoint+"(") || !strings.Contains(p.Test, "def check(candidate):") || p.CanonicalSolution == "" {
			t.Errorf("%s: the prompt must define %s, the test check(candidate), and there must be a solution", p.TaskID, p.EntryPoint)
		}
	}
}

// Read takes gzipped files (as HumanEval.jsonl.gz comes) as well as plain.
func TestReadGzip(t *testing.T) {
	t.Parallel()
	plain, err := problems.Open(filepath.Join(".", "problems.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	enc := json.NewEncoder(zw)
	for _, p := range plain {
		if err := enc.Encode(p); err != nil {
			t.Fatal(err)
		}
	}
	zw.Close()
	got, err := problems.Read(&gz)
	if err != nil || !reflect.DeepEqual(got, plain) {
		t.Fatalf("gzipped: %v; %d problems, want the %d of problems.jsonl", err, len(got), len(plain))
	}
	if _, err := problems.Read(strings.NewReader(`{"task_id":"x/1","prompt":"def f():\n"}`)); err == nil {
		t.Error("a problem without entry_point and test was accepted")
	}
}

// The set is sound: each canonical solution passes its tests and
// BrokenSolution fails them. This runs the project's own problems with the
// local python3 (no sandbox needed for code we wrote); the Docker test in
// cmd/submit runs them in sandboxes.
func TestExamplesSolveLocally(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("needs python3")
	}
	for _, p := range problems.Examples() {
		for solution, wantPass := range map[string]bool{p.CanonicalSolution: true, problems.BrokenSolution: false} {
			out, err := exec.CommandContext(t.Context(), python, "-c", p.Code(solution)).CombinedOutput()
			if (err == nil) != wantPass {
				t.Errorf("%s: passed %v, want %v:\n%s", p.TaskID, err == nil, wantPass, out)
			}
		}
	}
}
