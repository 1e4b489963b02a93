package executor

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/internal/judge"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// judged is what the executor observes of a launcher that compiled (when
// compileExit is set) and framed reps, then a trailer signed with seal.
func judged(seal envelope.Seal, spec *judgeSpec, compileExit *int, compileOut string, reps []envelope.CaseReport, tr envelope.Trailer) observed {
	o := observed{judge: spec}
	if compileExit != nil {
		tr.CompileExit, tr.CompileBytes = compileExit, int64(len(compileOut))
		o.compileOut, o.compileN = []byte(compileOut), int64(len(compileOut))
	}
	var d envelope.CaseDigest
	for _, r := range reps {
		b, _ := json.Marshal(r)
		d.Add(b)
		o.cases = append(o.cases, b)
	}
	tr.Cases, tr.CasesSHA256 = d.Count(), d.Sum()
	o.casesN, o.casesSHA = d.Count(), d.Sum()
	o.trailer = seal.Sign(tr)
	return o
}

func TestVerdictJudged(t *testing.T) {
	t.Parallel()
	seal := envelope.NewSeal()
	lim := limits.Default()
	zero, one := 0, 1
	three := &judgeSpec{compiled: true, tests: true, names: []string{"a", "b", "c"}}
	pass := func(i int) envelope.CaseReport {
		return envelope.CaseReport{Index: i, Verdict: envelope.CasePassed, Exit: &zero}
	}
	wrong := envelope.CaseReport{Index: 1, Verdict: envelope.CaseWrongAnswer, Exit: &zero,
		Diff: &judge.Diff{Line: 1, Expected: "3", Actual: "4"}}

	for _, tc := range []struct {
		name         string
		obs          observed
		status       jobs.Status
		passed, fail int
		notRun       int
		msgHas       string
	}{
		{name: "all passed", obs: judged(seal, three, &zero, "", []envelope.CaseReport{pass(0), pass(1), pass(2)}, envelope.Trailer{}),
			status: jobs.StatusSucceeded, passed: 3},
		{name: "one wrong", obs: judged(seal, three, &zero, "", []envelope.CaseReport{pass(0), wrong, pass(2)}, envelope.Trailer{Exit: 1}),
			status: jobs.StatusFailed, passed: 2, fail: 1, msgHas: `case 1 "b", wrong_answer`},
		{name: "stopped at the first failure", obs: judged(seal, three, &zero, "", []envelope.CaseReport{pass(0), wrong}, envelope.Trailer{Exit: 1}),
			status: jobs.StatusFailed, passed: 1, fail: 1, notRun: 1},
		// Exit 0 from the launcher and fewer reports than cases: never a pass.
		{name: "missing reports", obs: judged(seal, three, &zero, "", []envelope.CaseReport{pass(0)}, envelope.Trailer{}),
			status: jobs.StatusFailed, passed: 1, notRun: 2},
		{name: "compile error", obs: judged(seal, three, &one, "main.c:1: error\n", nil, envelope.Trailer{Exit: 1}),
			status: jobs.StatusCompileErr, msgHas: "compile step exited with status 1"},
		{name: "reports signed by another key", obs: judged(envelope.NewSeal(), three, &zero, "", []envelope.CaseReport{pass(0), pass(1), pass(2)}, envelope.Trailer{}),
			status: jobs.StatusFailed, msgHas: errNoVerdict},
		{name: "a report more than the trailer counts", obs: func() observed {
			o := judged(seal, three, &zero, "", []envelope.CaseReport{pass(0), pass(1), pass(2)}, envelope.Trailer{})
			o.casesN++
			return o
		}(), status: jobs.StatusFailed, msgHas: errNoVerdict},
		{name: "a report swapped for another", obs: func() observed {
			o := judged(seal, three, &zero, "", []envelope.CaseReport{pass(0), wrong, pass(2)}, envelope.Trailer{})
			b, _ := json.Marshal(pass(1))
			o.cases[1] = b
			// As the capture digests what arrived.
			var d envelope.CaseDigest
			for _, c := range o.cases {
				d.Add(c)
			}
			o.casesSHA = d.Sum()
			return o
		}(), status: jobs.StatusFailed, passed: 3, msgHas: ""},
		{name: "no compile report though one was asked", obs: judged(seal, three, nil, "", []envelope.CaseReport{pass(0), pass(1), pass(2)}, envelope.Trailer{}),
			status: jobs.StatusFailed, msgHas: errNoVerdict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := verdict(tc.obs, seal, lim)
			if tc.name == "a report swapped for another" {
				// The digest covers what was framed, so the swap is still
				// the launcher's digest only if the bytes are: they are
				// not, and the verdict is void.
				if out.status != jobs.StatusFailed || !strings.Contains(out.msg, errNoVerdict) {
					t.Fatalf("status %s (%s), want failed without a verdict", out.status, out.msg)
				}
				return
			}
			if out.status != tc.status || !strings.Contains(out.msg, tc.msgHas) {
				t.Fatalf("status %s (%q), want %s with %q", out.status, out.msg, tc.status, tc.msgHas)
			}
			if tc.status == jobs.StatusCompileErr {
				if out.compile == nil || out.compile.Output != "main.c:1: error\n" || *out.compile.Exit != 1 || out.tests != nil {
					t.Fatalf("compile %+v, tests %+v", out.compile, out.tests)
				}
				return
			}
			if strings.Contains(tc.msgHas, errNoVerdict) {
				if out.tests != nil {
					t.Fatalf("tests reported without a verdict: %+v", out.tests)
				}
				return
			}
			tr := out.tests
			if tr == nil || tr.Total != 3 || tr.Passed != tc.passed || tr.Failed != tc.fail || tr.NotRun != tc.notRun || len(tr.Cases) != 3 {
				t.Fatalf("tests %+v, want %d passed, %d failed, %d not run of 3", tr, tc.passed, tc.fail, tc.notRun)
			}
			if tr.Cases[1].Name != "b" {
				t.Fatalf("case names not kept: %+v", tr.Cases)
			}
		})
	}
}

func TestJudgeHeader(t *testing.T) {
	t.Parallel()
	lim := limits.Default()
	lim.Timeout = limits.Duration(10e9)
	p := DefaultPresets()["c"]
	j := &jobs.Job{ID: "x", Image: "c", Code: "int main(){}", Tests: []jobs.TestCase{
		{Name: "first", Stdin: "1\n", ExpectedStdout: "1\n"},
		{Args: []string{"-v"}, Timeout: limits.Duration(2e9), Compare: "float", Tolerance: 1e-3},
	}}
	env, err := buildEnvelope(j, p, lim, jobrun.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if env.judge == nil || !env.judge.compiled || len(env.judge.names) != 2 || env.judge.names[0] != "first" {
		t.Fatalf("spec %+v", env.judge)
	}
	j.Tests[1].Timeout = limits.Duration(11e9)
	if _, err := buildEnvelope(j, p, lim, jobrun.Options{}, nil); err == nil || !strings.Contains(err.Error(), "tests[1].timeout: 11s is over the job's timeout of 10s") {
		t.Fatalf("case timeout over the job's: %v", err)
	}
	// A preset without a compile step and a job without tests: no spec,
	// and a header any launcher reads.
	env, err = buildEnvelope(&jobs.Job{ID: "y", Image: "python", Code: "1"}, DefaultPresets()["python"], lim, jobrun.Options{}, nil)
	if err != nil || env.judge != nil || strings.Contains(string(env.header), "compile") {
		t.Fatalf("plain job: spec %+v, err %v, header %s", env.judge, err, env.header)
	}
}

// A worker without the languages' image still checks out and serves
// python; a job of a language preset is rejected, naming the image and
// how to build it. Without the default image, Check fails.
func TestOptionalImageMissing(t *testing.T) {
	t.Parallel()
	idle := func(killed <-chan struct{}, stdin io.Reader, stdout, stderr io.Writer) int64 { <-killed; return 137 }
	f := &fakeDocker{missing: map[string]bool{LangsImage: true}, behave: idle}
	e, err := newWithAPI(Config{WorkerID: "w"}, f)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := t.Context()
	if err := e.Check(ctx); err != nil {
		t.Fatalf("Check without the optional image: %v", err)
	}
	res, err := e.Run(ctx, &jobs.Job{ID: "j", Image: "cpp", Code: "int main(){}"}, jobrun.Options{})
	if err != nil || res.Status != jobs.StatusRejected || !strings.Contains(res.Error, LangsImage) || !strings.Contains(res.Error, "make images-all") {
		t.Fatalf("cpp without its image: %v, %+v", err, res)
	}
	g := &fakeDocker{missing: map[string]bool{DefaultImage: true}}
	e2, err := newWithAPI(Config{WorkerID: "w"}, g)
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	if err := e2.Check(ctx); !errors.Is(err, ErrImageMissing) {
		t.Fatalf("Check without the default image: %v", err)
	}
}
