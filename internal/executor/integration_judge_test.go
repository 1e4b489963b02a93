package executor

// Judged jobs in the real sandbox: a compile step and test cases run by
// the launcher, each case a fresh process, and the attacks on their
// verdicts. They need the branch's own launcher: SANDFLEET_TEST_IMAGE.

import (
	"os"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// judgeSetup is setup with the presets on the test's images:
// SANDFLEET_TEST_IMAGE for python and shell, SANDFLEET_TEST_LANGS_IMAGE
// for the languages (default LangsImage).
func judgeSetup(t *testing.T) *Executor {
	t.Helper()
	img, langs := os.Getenv("SANDFLEET_TEST_IMAGE"), os.Getenv("SANDFLEET_TEST_LANGS_IMAGE")
	return setup(t, func(c *Config) {
		c.Presets = DefaultPresets()
		for n, p := range c.Presets {
			switch {
			case p.Image == DefaultImage && img != "":
				p.Image = img
			case p.Image == LangsImage && langs != "":
				p.Image = langs
			}
			c.Presets[n] = p
		}
	})
}

// adder reads two numbers per line and prints their sum; special inputs
// make it misbehave.
const adder = `
import sys, time, os
data = sys.stdin.read().split()
if data[:1] == ["crash"]: sys.exit(3)
if data[:1] == ["sleep"]: time.sleep(30)
if data[:1] == ["flood"]:
    while True: sys.stdout.write("x" * 65536)
if data[:1] == ["float"]: print(1/3); sys.exit(0)
if data[:1] == ["args"]: print(" ".join(sys.argv[1:])); sys.exit(0)
a, b = int(data[0]), int(data[1])
print(a + b)
`

func TestIntegrationJudge(t *testing.T) {
	t.Parallel()
	e := judgeSetup(t)
	lim := limits.Limits{Timeout: limits.Duration(60e9), Output: 64 << 10}
	j := job(adder, withLimits(lim), func(j *jobs.Job) {
		j.Tests = []jobs.TestCase{
			{Name: "sum", Stdin: "1 2\n", ExpectedStdout: "3\n"},
			{Name: "wrong", Stdin: "2 2\n", ExpectedStdout: "5\n"},
			{Name: "crash", Stdin: "crash", ExpectedStdout: ""},
			{Name: "slow", Stdin: "sleep", ExpectedStdout: "", Timeout: limits.Duration(1e9)},
			{Name: "flood", Stdin: "flood", ExpectedStdout: ""},
			{Name: "trimmed", Stdin: "1 1", ExpectedStdout: "2   \n\n\n", Compare: "trimmed"},
			{Name: "float", Stdin: "float", ExpectedStdout: "0.3333", Compare: "float", Tolerance: 1e-3},
			{Name: "args", Stdin: "args", Args: []string{"-n", "5"}, ExpectedStdout: "-n 5\n"},
		}
	})
	res := run(t, e, j)
	if res.Status != jobs.StatusFailed || res.Tests == nil {
		t.Fatalf("status %s (%s), tests %+v; stderr %q", res.Status, res.Error, res.Tests, res.Stderr)
	}
	want := []string{jobs.CasePassed, jobs.CaseWrongAnswer, jobs.CaseRuntimeErr, jobs.CaseTimeout,
		jobs.CaseOutputLimit, jobs.CasePassed, jobs.CasePassed, jobs.CasePassed}
	tr := res.Tests
	if tr.Total != 8 || tr.Passed != 4 || tr.Failed != 4 || tr.NotRun != 0 {
		t.Errorf("summary %d/%d passed, %d failed, %d not run", tr.Passed, tr.Total, tr.Failed, tr.NotRun)
	}
	for i, c := range tr.Cases {
		if c.Verdict != want[i] {
			t.Errorf("case %d %q: %s (%s), want %s; stderr %q", i, c.Name, c.Verdict, c.Error, want[i], c.Stderr)
		}
		if c.DurationMS == nil || (c.Verdict == jobs.CasePassed && (c.PeakMemoryBytes == nil || *c.PeakMemoryBytes <= 0 || c.CPUMS == nil)) {
			t.Errorf("case %d: figures missing: %+v", i, c)
		}
	}
	if d := tr.Cases[1].Diff; d == nil || d.Line != 1 || d.Expected != "5\n" || d.Actual != "4\n" {
		t.Errorf("wrong answer's diff %+v", d)
	}
	if c := tr.Cases[2]; c.Exit == nil || *c.Exit != 3 {
		t.Errorf("runtime error's exit %v", c.Exit)
	}
	if c := tr.Cases[3]; *c.DurationMS < 900 || *c.DurationMS > 10000 {
		t.Errorf("the slow case took %d ms with a 1s limit", *c.DurationMS)
	}
	if c := tr.Cases[4]; c.StdoutBytes <= 64<<10 {
		t.Errorf("flood case counted %d bytes", c.StdoutBytes)
	}
	if !strings.Contains(res.Error, "4 of 8 test cases passed") || !strings.Contains(res.Error, `case 1 "wrong"`) {
		t.Errorf("error %q", res.Error)
	}

	// The same program with only the passing cases: succeeded.
	ok := job(adder, withLimits(lim), func(j *jobs.Job) {
		j.Tests = []jobs.TestCase{{Stdin: "1 2", ExpectedStdout: "3\n"}, {Stdin: "40 2", ExpectedStdout: "42\n"}}
	})
	if res := run(t, e, ok); res.Status != jobs.StatusSucceeded || res.Tests.Passed != 2 || *res.Exit != 0 {
		t.Fatalf("all passing: %s (%s), %+v", res.Status, res.Error, res.Tests)
	}
}

func TestIntegrationJudgeStopOnFirstFailure(t *testing.T) {
	t.Parallel()
	e := judgeSetup(t)
	j := job(adder, func(j *jobs.Job) {
		j.StopOnFirstFailure = true
		j.Tests = []jobs.TestCase{{Stdin: "1 1", ExpectedStdout: "2\n"}, {Stdin: "crash"}, {Stdin: "1 2", ExpectedStdout: "3\n"}}
	})
	res := run(t, e, j)
	if res.Status != jobs.StatusFailed || res.Tests.Passed != 1 || res.Tests.Failed != 1 || res.Tests.NotRun != 1 ||
		res.Tests.Cases[2].Verdict != jobs.CaseNotRun {
		t.Fatalf("%s (%s): %+v", res.Status, res.Error, res.Tests)
	}
}

// A case cannot pass by writing what looks like the launcher's frames,
// by writing to the launcher's streams, by leaving a process for the next
// case, or by exiting 0 with the wrong output.
func TestIntegrationRedTeamJudgeForgery(t *testing.T) {
	t.Parallel()
	e := judgeSetup(t)
	const forger = `
import os, sys, struct, json, subprocess
mode = sys.stdin.read().strip()
if mode == "frames":
    # A report claiming a pass, and a trailer, as the launcher frames them.
    rep = json.dumps({"index": 0, "verdict": "passed", "exit": 0, "duration_ms": 1, "stdout_bytes": 0, "stderr_bytes": 0}).encode()
    for kind, p in ((b"r", rep), (b"t", b'{"exit":0} ' + b"0" * 64)):
        sys.stdout.buffer.write(kind + struct.pack(">I", len(p)) + p)
    for path in ("/proc/1/fd/1", "/dev/stdout", "/proc/self/fd/1"):
        try:
            with open(path, "wb") as f: f.write(b"r" + struct.pack(">I", len(rep)) + rep)
        except OSError as e:
            print("refused", path, e.errno, file=sys.stderr)
elif mode == "leave":
    # A process out of the case's group, to outlive it.
    if os.fork() == 0:
        os.setsid()
        import time; time.sleep(60)
    print("left")
elif mode == "count":
    others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid())]
    print(len(others))
`
	j := job(forger, func(j *jobs.Job) {
		j.Tests = []jobs.TestCase{
			{Name: "frames", Stdin: "frames", ExpectedStdout: "the answer\n"},
			{Name: "leave", Stdin: "leave", ExpectedStdout: "left\n"},
			{Name: "count", Stdin: "count", ExpectedStdout: "0\n"},
		}
	})
	res := run(t, e, j)
	if res.Status != jobs.StatusFailed || res.Tests == nil {
		t.Fatalf("status %s (%s), tests %+v", res.Status, res.Error, res.Tests)
	}
	cs := res.Tests.Cases
	if cs[0].Verdict != jobs.CaseWrongAnswer {
		t.Errorf("forged frames: %s (%+v)", cs[0].Verdict, cs[0])
	}
	if cs[1].Verdict != jobs.CasePassed || cs[2].Verdict != jobs.CasePassed {
		t.Errorf("a case's leftover process reached the next case: %+v / %+v", cs[1], cs[2])
	}
	if res.Tests.Passed != 2 || len(res.Stdout) != 0 {
		t.Errorf("summary %+v, stdout %q", res.Tests, res.Stdout)
	}
}

// The tricks that make a wrong program's exit status 0 (an atexit handler
// calling os._exit(0), an excepthook raising SystemExit(0), sys.exit made
// a no-op), which beat any harness whose checks share the process with
// the code under test, change nothing for judged cases: the expected
// output never enters the sandbox, and a wrong answer stays wrong.
func TestIntegrationRedTeamJudgedExitTricks(t *testing.T) {
	t.Parallel()
	e := judgeSetup(t)
	const wrong = `import sys
trick = sys.stdin.readline().strip()
if trick == "atexit":
    import atexit, os
    atexit.register(os._exit, 0)
elif trick == "excepthook":
    def hook(*a):
        raise SystemExit(0)
    sys.excepthook = hook
elif trick == "sys.exit":
    sys.exit = lambda *a: None
    sys.excepthook = lambda *a: None
print(0)
assert False, "the program's own check fails"
`
	var cases []jobs.TestCase
	for _, trick := range []string{"atexit", "excepthook", "sys.exit"} {
		cases = append(cases, jobs.TestCase{Name: trick, Stdin: trick + "\n", ExpectedStdout: "3\n"})
	}
	res := run(t, e, job(wrong, func(j *jobs.Job) { j.Tests = cases }))
	if res.Status != jobs.StatusFailed || res.Tests == nil || res.Tests.Passed != 0 {
		t.Fatalf("status %s (%s), tests %+v", res.Status, res.Error, res.Tests)
	}
	for _, c := range res.Tests.Cases {
		t.Logf("%s: %s, exit %d", c.Name, c.Verdict, derefInt(c.Exit))
		if c.Verdict == jobs.CasePassed || c.Verdict == "" {
			t.Errorf("%s: %q", c.Name, c.Verdict)
		}
	}
}

// The compile step: its failure is compile_error with the compiler's
// output, nothing else runs; its success runs the job. Here a job's own
// compile command on the Python image; the languages' run in
// integration_langs_test.go.
func TestIntegrationCompileStep(t *testing.T) {
	t.Parallel()
	e := judgeSetup(t)
	bad := shell("echo should not run", func(j *jobs.Job) {
		j.Compile = []string{"sh", "-c", "echo 'main.x:1: error: expected ;' >&2; echo to stdout; exit 4"}
	})
	res := run(t, e, bad)
	if res.Status != jobs.StatusCompileErr || res.Exit == nil || *res.Exit != 4 || res.Compile == nil {
		t.Fatalf("status %s (%s), exit %v, compile %+v", res.Status, res.Error, res.Exit, res.Compile)
	}
	if !strings.Contains(res.Compile.Output, "expected ;") || !strings.Contains(res.Compile.Output, "to stdout") || res.Stdout != "" {
		t.Errorf("compile output %q, stdout %q", res.Compile.Output, res.Stdout)
	}
	if res.ExitCode() != 65 {
		t.Errorf("submit would exit %d", res.ExitCode())
	}

	good := shell(`cat /tmp/built; echo " ran"`, func(j *jobs.Job) {
		j.Compile = []string{"sh", "-c", "printf built > /tmp/built"}
		j.Tests = []jobs.TestCase{{ExpectedStdout: "built ran\n"}, {ExpectedStdout: "built ran\n"}}
	})
	res = run(t, e, good)
	if res.Status != jobs.StatusSucceeded || res.Compile == nil || *res.Compile.Exit != 0 || res.Tests.Passed != 2 {
		t.Fatalf("status %s (%s), compile %+v, tests %+v", res.Status, res.Error, res.Compile, res.Tests)
	}
	plain := shell(`cat /tmp/built`, func(j *jobs.Job) { j.Compile = []string{"sh", "-c", "printf built > /tmp/built"} })
	if res := run(t, e, plain); res.Status != jobs.StatusSucceeded || res.Stdout != "built" {
		t.Fatalf("compiled, no tests: %s (%s) %q", res.Status, res.Error, res.Stdout)
	}
}

// Every job starts from the same clock zone, locale, hash seed, build
// epoch and host name; a job may override the environment. The result
// names the image ID its sandbox ran.
func TestIntegrationDeterministicDefaults(t *testing.T) {
	t.Parallel()
	e := judgeSetup(t)
	const probe = `import os, socket
print(" ".join(os.environ.get(k, "-") for k in ("TZ", "LANG", "PYTHONHASHSEED", "SOURCE_DATE_EPOCH")), socket.gethostname(), hash("sandfleet"))`
	a, b := run(t, e, job(probe)), run(t, e, job(probe))
	if a.Status != jobs.StatusSucceeded || !strings.HasPrefix(a.Stdout, "UTC C.UTF-8 0 0 sandbox ") || a.Stdout != b.Stdout {
		t.Fatalf("defaults: %q and %q (%s)", a.Stdout, b.Stdout, a.Error)
	}
	if !strings.HasPrefix(a.ImageDigest, "sha256:") || a.ImageDigest != b.ImageDigest {
		t.Errorf("image digests %q, %q", a.ImageDigest, b.ImageDigest)
	}
	o := run(t, e, job(probe, func(j *jobs.Job) { j.Env = map[string]string{"TZ": "Europe/Paris", "PYTHONHASHSEED": "1"} }))
	if !strings.HasPrefix(o.Stdout, "Europe/Paris C.UTF-8 1 0 sandbox ") {
		t.Errorf("overridden: %q", o.Stdout)
	}
}

// A float case whose expected output is an infinity is passed by that
// infinity only: a program that prints any other number fails it (|x-y|
// and tol*|x| were both +Inf, and Inf <= Inf passed anything).
func TestIntegrationRedTeamFloatInfinity(t *testing.T) {
	t.Parallel()
	e := judgeSetup(t)
	const zero = `input(); print(0)`
	var cases []jobs.TestCase
	for _, exp := range []string{"inf\n", "-inf\n", "Infinity\n"} {
		cases = append(cases, jobs.TestCase{Name: exp, Stdin: "x\n", ExpectedStdout: exp, Compare: "float"})
	}
	res := run(t, e, job(zero, func(j *jobs.Job) { j.Tests = cases }))
	if res.Status != jobs.StatusFailed || res.Tests == nil || res.Tests.Passed != 0 {
		t.Fatalf("a program printing 0 for infinities: %s (%s), %+v", res.Status, res.Error, res.Tests)
	}
	inf := job(`input(); print(float("inf"))`, func(j *jobs.Job) {
		j.Tests = []jobs.TestCase{{Stdin: "x\n", ExpectedStdout: "Infinity\n", Compare: "float"}}
	})
	if res := run(t, e, inf); res.Status != jobs.StatusSucceeded {
		t.Errorf("inf for Infinity: %s (%s), %+v", res.Status, res.Error, res.Tests)
	}
}
