package envelope

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"math"

	"github.com/sandfleet/sandfleet/internal/field"
	"github.com/sandfleet/sandfleet/internal/judge"
)

// A job may have a compile step and test cases; both are opt-in, so that
// a launcher and an executor of different versions agree on every job
// that uses neither.
//
// Compile (Header.Compile) runs before anything else, as the job's
// command would, with /dev/null as its stdin and one pipe for its stdout
// and stderr, which the launcher frames as FrameCompile up to
// Tests.OutputLimit (or the header's CompileOutputLimit). When it fails, nothing else runs and
// the trailer gives its exit status (CompileExit).
//
// Tests (Header.Tests) replace the single run: each case is a fresh
// process of Argv plus the case's Args in its own process group, fed the
// case's stdin through a pipe, its stdout kept for the comparison and its
// stderr excerpted; the launcher kills its group at the case's timeout or
// when a stream passes OutputLimit, and after it ends. Each case's verdict
// goes out as a FrameCase frame holding a CaseReport's JSON; the trailer
// counts them and gives the SHA-256 of their payloads (see CaseDigest),
// so the executor accepts only the reports the launcher sent.

// Tests are a job's test cases as the launcher runs them.
type Tests struct {
	Cases              []Case `json:"cases"`
	StopOnFirstFailure bool   `json:"stop_on_first_failure,omitempty"`
	// OutputLimit bounds each stream of each case, in bytes.
	OutputLimit int64 `json:"output_limit"`
}

// Case is one test case.
type Case struct {
	Stdin     []byte   `json:"stdin,omitempty"`
	Args      []string `json:"args,omitempty"`
	Expected  []byte   `json:"expected"`
	TimeoutMS int64    `json:"timeout_ms"`
	Compare   string   `json:"compare,omitempty"` // a judge mode; "" is exact
	Tolerance float64  `json:"tolerance,omitempty"`
}

// Verdicts of a case.
const (
	CasePassed      = "passed"
	CaseWrongAnswer = "wrong_answer"
	CaseRuntimeErr  = "runtime_error"
	CaseTimeout     = "timeout"
	CaseOutputLimit = "output_limit"
	CaseOOM         = "oom" // killed by the sandbox's memory limit
)

// CaseReport is the launcher's verdict on one case.
type CaseReport struct {
	Index      int         `json:"index"` // 0-based, in the header's order
	Verdict    string      `json:"verdict"`
	Exit       *int        `json:"exit,omitempty"` // nil when the launcher killed it
	Signal     int         `json:"signal,omitempty"`
	DurationMS int64       `json:"duration_ms"`
	CPUMS      *int64      `json:"cpu_ms,omitempty"`
	MaxRSS     *int64      `json:"maxrss_bytes,omitempty"`
	StdoutN    int64       `json:"stdout_bytes"`
	StderrN    int64       `json:"stderr_bytes"`
	Stderr     string      `json:"stderr,omitempty"` // the first MaxCaseStderr bytes
	Diff       *judge.Diff `json:"diff,omitempty"`
	Error      string      `json:"error,omitempty"`
}

// Bounds of the test cases.
const (
	MaxCases      = 1000
	MaxCaseStderr = 1 << 10
	// MaxCompileOutput bounds the compiler's output kept when the header
	// gives no bound.
	MaxCompileOutput = 64 << 10
)

// CaseDigest accumulates the SHA-256 of the case frames' payloads, each
// preceded by its length, as both the launcher and the executor compute it.
type CaseDigest struct {
	h hash.Hash
	n int
}

// Add counts one case frame's payload.
func (d *CaseDigest) Add(p []byte) {
	if d.h == nil {
		d.h = sha256.New()
	}
	var l [4]byte
	binary.BigEndian.PutUint32(l[:], uint32(len(p)))
	d.h.Write(l[:])
	d.h.Write(p)
	d.n++
}

// Count is the number of payloads added.
func (d *CaseDigest) Count() int { return d.n }

// Sum is the hex digest; "" when nothing was added.
func (d *CaseDigest) Sum() string {
	if d.h == nil {
		return ""
	}
	return hex.EncodeToString(d.h.Sum(nil))
}

func (h *Header) validateTests() error {
	if len(h.Compile) > 0 {
		if err := field.Argv(h.Compile); err != nil {
			return fmt.Errorf("%w: compile: %w", ErrFormat, err)
		}
	}
	if h.CompileOutputLimit < 0 {
		return errorf("compile_output_limit must not be negative")
	}
	t := h.Tests
	if t == nil {
		return nil
	}
	switch {
	case len(t.Cases) == 0 || len(t.Cases) > MaxCases:
		return errorf("tests: 1 to %d cases", MaxCases)
	case t.OutputLimit <= 0:
		return errorf("tests: output_limit must be positive")
	}
	for i, c := range t.Cases {
		switch {
		case c.TimeoutMS <= 0:
			return errorf("tests[%d]: timeout_ms must be positive", i)
		case !judge.ValidMode(c.Compare):
			return errorf("tests[%d]: unknown compare mode %q", i, c.Compare)
		case c.Tolerance < 0 || math.IsNaN(c.Tolerance) || math.IsInf(c.Tolerance, 0):
			return errorf("tests[%d]: tolerance must be a finite number, 0 or more", i)
		}
		if err := field.Argv(append(append([]string{}, h.Argv...), c.Args...)); err != nil {
			return fmt.Errorf("%w: tests[%d]: %w", ErrFormat, i, err)
		}
	}
	return nil
}
