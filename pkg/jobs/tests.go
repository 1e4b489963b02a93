package jobs

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/sandfleet/sandfleet/internal/field"
	"github.com/sandfleet/sandfleet/internal/judge"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// TestCase is one case of a judged job (Job.Tests): the program runs once
// per case, as a fresh process in the same sandbox, with the case's stdin
// and the preset's command plus Args, and passes when it exits 0 within
// Timeout and its stdout matches ExpectedStdout under Compare.
type TestCase struct {
	Name           string   `json:"name,omitempty"`
	Stdin          string   `json:"stdin,omitempty"`
	Args           []string `json:"args,omitempty"`
	ExpectedStdout string   `json:"expected_stdout"`
	// Timeout of this case alone; 0 means the job's timeout, which also
	// bounds the whole run (compile step and every case).
	Timeout limits.Duration `json:"timeout,omitempty"`
	// Compare is "exact" (the default), "trimmed" (trailing whitespace of
	// each line and trailing blank lines ignored) or "float" (trimmed, and
	// numbers may differ by Tolerance, absolute or relative).
	Compare   string  `json:"compare,omitempty"`
	Tolerance float64 `json:"tolerance,omitempty"` // float only; 0 means 1e-6
}

// Case verdicts (CaseResult.Verdict).
const (
	CasePassed      = "passed"
	CaseWrongAnswer = "wrong_answer"
	CaseRuntimeErr  = "runtime_error"
	CaseTimeout     = "timeout"
	CaseOutputLimit = "output_limit"
	CaseOOM         = "oom"
	// CaseNotRun: an earlier case failed and the job asked to stop there
	// (stop_on_first_failure), or the run ended before this case.
	CaseNotRun = "not_run"
)

// MaxTests bounds a job's cases; MaxTestName a case's name.
const (
	MaxTests    = 1000
	MaxTestName = 128
)

// TestReport is a judged job's per-case verdicts and their summary
// (Result.Tests).
type TestReport struct {
	Total  int          `json:"total"`
	Passed int          `json:"passed"`
	Failed int          `json:"failed"`  // ran and did not pass
	NotRun int          `json:"not_run"` // see CaseNotRun
	Cases  []CaseResult `json:"cases"`
}

// CaseResult is the verdict on one case.
type CaseResult struct {
	Index           int    `json:"index"`
	Name            string `json:"name,omitempty"`
	Verdict         string `json:"verdict"`
	Exit            *int   `json:"exit_code"`
	Signal          int    `json:"signal,omitempty"`
	DurationMS      *int64 `json:"duration_ms"`
	CPUMS           *int64 `json:"cpu_ms"`
	PeakMemoryBytes *int64 `json:"peak_memory_bytes"`
	StdoutBytes     int64  `json:"stdout_bytes"`
	StderrBytes     int64  `json:"stderr_bytes"`
	// Stderr is the first KiB of the case's stderr.
	Stderr string `json:"stderr,omitempty"`
	// Diff is where a wrong answer first differs from the expected output.
	Diff  *Diff  `json:"diff,omitempty"`
	Error string `json:"error,omitempty"`
}

// Diff is the first line where a case's stdout differs from the expected
// one (1-based), each side cut to 200 bytes. Reason says what differs when
// the lines alone do not show it (a missing line, a token out of
// tolerance). It has the fields of the launcher's judge.Diff, which the
// executor converts.
type Diff struct {
	Line     int    `json:"line"`
	Expected string `json:"expected"`
	Actual   string `json:"actual"`
	Reason   string `json:"reason,omitempty"`
}

// CompileReport is a compiled preset's compile step (Result.Compile).
type CompileReport struct {
	Exit       *int   `json:"exit_code"`
	DurationMS int64  `json:"duration_ms"`
	Output     string `json:"output"` // stdout and stderr as one
	// OutputTruncated: the compiler wrote more than the output cap (the
	// job's output limit).
	OutputTruncated bool `json:"output_truncated"`
}

// validateTests checks the judge fields that need no worker's limits.
func (j *Job) validateTests() error {
	if len(j.Tests) == 0 {
		if j.StopOnFirstFailure {
			return &field.Error{Field: "stop_on_first_failure", Reason: "needs tests"}
		}
		return nil
	}
	if len(j.Tests) > MaxTests {
		return &field.Error{Field: "tests", Reason: fmt.Sprintf("%d cases, over the limit of %d", len(j.Tests), MaxTests)}
	}
	if j.Stdin != "" {
		return &field.Error{Field: "stdin", Reason: "a job with tests gives each case its own stdin (tests[i].stdin)"}
	}
	for i, c := range j.Tests {
		at := fmt.Sprintf("tests[%d]", i)
		switch {
		case len(c.Name) > MaxTestName || strings.ContainsFunc(c.Name, func(r rune) bool { return r < ' ' || r == 0x7f }):
			return &field.Error{Field: at + ".name", Reason: fmt.Sprintf("at most %d bytes, no control characters", MaxTestName)}
		case !judge.ValidMode(c.Compare):
			return &field.Error{Field: at + ".compare", Reason: fmt.Sprintf("%s is not one of %s", field.Quote(c.Compare), strings.Join(judge.Modes, ", "))}
		case c.Tolerance < 0 || math.IsNaN(c.Tolerance) || math.IsInf(c.Tolerance, 0):
			return &field.Error{Field: at + ".tolerance", Reason: "must be a finite number, 0 or more"}
		case c.Tolerance != 0 && c.Compare != judge.Float:
			return &field.Error{Field: at + ".tolerance", Reason: `only with "compare": "float"`}
		case c.Timeout < 0:
			return &field.Error{Field: at + ".timeout", Reason: "must not be negative"}
		}
		if len(c.Args) > field.MaxArgs {
			return &field.Error{Field: at + ".args", Reason: fmt.Sprintf("%d entries, over the limit of %d", len(c.Args), field.MaxArgs)}
		}
		for k, a := range c.Args {
			if strings.IndexByte(a, 0) >= 0 || len(a) > field.MaxArgBytes {
				return &field.Error{Field: fmt.Sprintf("%s.args[%d]", at, k), Reason: fmt.Sprintf("at most %d bytes, no NUL byte", field.MaxArgBytes)}
			}
		}
	}
	return nil
}

func (j *Job) validateCompile() error {
	if len(j.Compile) == 0 {
		return nil
	}
	if err := field.Argv(j.Compile); err != nil {
		var fe *field.Error
		if errors.As(err, &fe) {
			return &field.Error{Field: strings.Replace(fe.Field, "argv", "compile", 1), Reason: fe.Reason}
		}
		return err
	}
	return nil
}
