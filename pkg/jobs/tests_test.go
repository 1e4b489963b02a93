package jobs_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

func TestValidateTests(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, job, err string
	}{
		{"ok", `{"image":"c","code":"x","tests":[{"stdin":"1","expected_stdout":"1\n"},{"name":"big","args":["-n","5"],"expected_stdout":"0.5","compare":"float","tolerance":0.01,"timeout":"2s"}],"stop_on_first_failure":true}`, ""},
		{"ok trimmed", `{"image":"c","code":"x","tests":[{"expected_stdout":"1","compare":"trimmed"}]}`, ""},
		{"ok compile", `{"image":"c","code":"x","compile":["gcc","-o","/tmp/x","main.c"]}`, ""},
		{"unknown mode", `{"image":"c","tests":[{"expected_stdout":"1","compare":"fuzzy"}]}`, `tests[0].compare: "fuzzy" is not one of exact, trimmed, float`},
		{"tolerance without float", `{"image":"c","tests":[{"expected_stdout":"1","tolerance":0.1}]}`, `tests[0].tolerance: only with "compare": "float"`},
		{"negative tolerance", `{"image":"c","tests":[{"expected_stdout":"1","compare":"float","tolerance":-1}]}`, `tests[0].tolerance`},
		{"negative timeout", `{"image":"c","tests":[{"expected_stdout":"1","timeout":"-1s"}]}`, `invalid duration "-1s"`},
		{"name with control", `{"image":"c","tests":[{"name":"a\u0007","expected_stdout":"1"}]}`, `tests[0].name`},
		{"stdin beside tests", `{"image":"c","stdin":"x","tests":[{"expected_stdout":"1"}]}`, `stdin: a job with tests gives each case its own stdin`},
		{"stop without tests", `{"image":"c","stop_on_first_failure":true}`, `stop_on_first_failure: needs tests`},
		{"arg with NUL", `{"image":"c","tests":[{"args":["a\u0000"],"expected_stdout":""}]}`, `tests[0].args[0]`},
		{"empty compile command", `{"image":"c","compile":[""]}`, `compile[0]: the command is empty`},
		{"unknown case field", `{"image":"c","tests":[{"expected":"1"}]}`, `unknown field "expected"`},
		{"too many", `{"image":"c","tests":[` + strings.Repeat(`{"expected_stdout":""},`, jobs.MaxTests) + `{"expected_stdout":""}]}`, `tests: 1001 cases, over the limit of 1000`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j, err := jobs.Decode([]byte(tc.job), 0)
			if err == nil {
				j.Normalize()
				err = j.Validate()
			}
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("want an error with %q, got %v", tc.err, err)
			case err != nil && !errors.Is(err, jobs.ErrInvalidJob):
				t.Fatalf("error does not wrap ErrInvalidJob: %v", err)
			}
		})
	}
}

func TestCompileErrorExitCode(t *testing.T) {
	t.Parallel()
	r := &jobs.Result{Status: jobs.StatusCompileErr}
	if r.ExitCode() != 65 || !jobs.StatusCompileErr.Final() {
		t.Fatalf("compile_error exits %d, final %v", r.ExitCode(), jobs.StatusCompileErr.Final())
	}
}

// The case verdicts of the launcher's reports and of results are one set.
func TestCaseVerdictsAgree(t *testing.T) {
	t.Parallel()
	pairs := [][2]string{
		{envelope.CasePassed, jobs.CasePassed}, {envelope.CaseWrongAnswer, jobs.CaseWrongAnswer},
		{envelope.CaseRuntimeErr, jobs.CaseRuntimeErr}, {envelope.CaseTimeout, jobs.CaseTimeout},
		{envelope.CaseOutputLimit, jobs.CaseOutputLimit}, {envelope.CaseOOM, jobs.CaseOOM},
	}
	for _, p := range pairs {
		if p[0] != p[1] {
			t.Errorf("launcher %q, result %q", p[0], p[1])
		}
	}
}

// FuzzDecodeTests decodes and validates jobs with test cases, the part of
// a job the judge adds, and checks that a valid one survives a round trip.
func FuzzDecodeTests(f *testing.F) {
	for _, s := range []string{
		`{"image":"c","code":"x","tests":[{"stdin":"1","expected_stdout":"1\n"}]}`,
		`{"image":"c","tests":[{"name":"n","args":["a"],"expected_stdout":"0.5","compare":"float","tolerance":1e-3,"timeout":"1s"}],"stop_on_first_failure":true}`,
		`{"image":"c","tests":[{"expected_stdout":"1","compare":"trimmed"}],"compile":["gcc","main.c"]}`,
		`{"image":"c","tests":[]}`, `{"image":"c","tests":null}`, `{"image":"c","tests":[{"tolerance":"x"}]}`,
		`{"image":"c","tests":[{"timeout":1e400}]}`, `{"image":"c","tests":[{"compare":"float","tolerance":1e308}]}`,
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
		if err := j.Validate(); err != nil {
			if !errors.Is(err, jobs.ErrInvalidJob) {
				t.Fatalf("error does not wrap ErrInvalidJob: %v", err)
			}
			return
		}
		if len(j.Tests) > jobs.MaxTests {
			t.Fatalf("%d cases passed validation", len(j.Tests))
		}
		_, data2, err := jobs.Encode(j, 1<<20)
		if err != nil {
			t.Fatalf("Encode of a valid job: %v", err)
		}
		j2, err := jobs.Decode(data2, 1<<20)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", data2, err)
		}
		if err := j2.Validate(); err != nil || len(j2.Tests) != len(j.Tests) {
			t.Fatalf("round trip: %v, %d cases of %d", err, len(j2.Tests), len(j.Tests))
		}
	})
}
