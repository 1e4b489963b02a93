package executor

// A SWE-style eval on a template image: a Git repository with a failing
// test, made here, is baked into an image built FROM the sandbox image by
// build.sh template; each candidate patch is judged in a sandbox of its own
// by applying it to a copy of the repository, putting the task's tests
// back (a patch that edits them gains nothing) and running them.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/templates"
)

const sweCalc = `def add(a, b):
    return a - b


def mul(a, b):
    return a * b
`

const sweTests = `import unittest

from calc import add, mul


class TestCalc(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)
        self.assertEqual(add(-1, 1), 0)

    def test_mul(self):
        self.assertEqual(mul(2, 3), 6)


if __name__ == "__main__":
    unittest.main()
`

// sweApply applies a unified diff (git diff's) to the working directory,
// strictly: every context and removed line must match. The image has no
// git and no patch, so the task image brings its own, as an eval harness
// would.
const sweApply = `import re, sys

lines = sys.stdin.read().splitlines(keepends=True)
i = 0
while i < len(lines):
    if not lines[i].startswith("--- "):
        i += 1
        continue
    path = lines[i + 1][4:].strip()
    path = path[2:] if path.startswith("b/") else path
    i += 2
    with open(path) as f:
        old = f.read().splitlines(keepends=True)
    new, pos = [], 0
    while i < len(lines) and lines[i].startswith("@@ "):
        m = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,(\d+))? @@", lines[i])
        start, nold = int(m.group(1)), int(m.group(2) or 1)
        nnew = int(m.group(3) or 1)
        start = start - 1 if nold else start
        new += old[pos:start]
        pos = start
        i += 1
        while nold or nnew:
            tag, text = lines[i][0], lines[i][1:]
            i += 1
            if tag in " -":
                if pos >= len(old) or old[pos] != text:
                    sys.exit("apply.py: %s: the hunk does not match line %d" % (path, pos + 1))
                pos += 1
                nold -= 1
            if tag in " +":
                new.append(text)
                nnew -= 1
        while i < len(lines) and lines[i].startswith("\\"):
            i += 1
    new += old[pos:]
    with open(path, "w") as f:
        f.writelines(new)
`

// sweJudge is each job: exit 0 when the patched repository passes the
// task's tests, 3 when the patch does not apply, else the tests' failure.
const sweJudge = `cp -r /opt/task/repo /tmp/repo && cd /tmp/repo || exit 4
python3 /opt/task/apply.py < /workspace/candidate.patch || exit 3
cp /opt/task/repo/test_calc.py test_calc.py
python3 -m unittest -q test_calc
`

func TestIntegrationTemplateSWE(t *testing.T) {
	t.Parallel()
	cli := requireDocker(t)
	if _, err := exec.LookPath("git"); err != nil {
		testutil.Unavailable(t, "needs git to make the task's repository: %v", err)
	}
	ctx := t.TempDir()
	repo := filepath.Join(ctx, "repo")
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=sandfleet", "-c", "user.email=test@sandfleet.invalid"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(repo, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	git("init", "-q", "-b", "main")
	write("calc.py", sweCalc)
	write("test_calc.py", sweTests)
	git("add", ".")
	git("commit", "-q", "-m", "calc: add, with a failing test")
	// diff returns the patch that turns the committed files into edits.
	diff := func(edits map[string]string) string {
		t.Helper()
		for name, body := range edits {
			write(name, body)
		}
		d := git("diff")
		git("checkout", "--", ".")
		return d
	}
	fix := diff(map[string]string{"calc.py": strings.Replace(sweCalc, "a - b", "a + b", 1)})
	candidates := []struct {
		name, patch string
		exit        int // 0 passes the tests, 3 does not apply, 1 fails them
	}{
		{"no change", "", 1},
		{"fix", fix, 0},
		{"fix by sum", diff(map[string]string{"calc.py": strings.Replace(sweCalc, "a - b", "sum((a, b))", 1)}), 0},
		{"wrong operator", diff(map[string]string{"calc.py": strings.Replace(sweCalc, "a - b", "a * b", 1)}), 1},
		{"hard-coded answer", diff(map[string]string{"calc.py": strings.Replace(sweCalc, "a - b", "5", 1)}), 1},
		{"fixes add, breaks mul", diff(map[string]string{"calc.py": strings.Replace(strings.Replace(sweCalc, "a - b", "a + b", 1), "a * b", "a ** b", 1)}), 1},
		// It would pass its own edit of the tests: the task's are put back.
		{"edits the test", diff(map[string]string{"test_calc.py": strings.NewReplacer("add(2, 3), 5", "add(2, 3), -1", "add(-1, 1), 0", "add(-1, 1), -2").Replace(sweTests)}), 1},
		{"does not apply", strings.Replace(fix, " def add(a, b):", " def add(x, y):", 1), 3},
	}

	tag := "sandfleet/template-test:" + randHex(4)
	if err := os.WriteFile(filepath.Join(ctx, "apply.py"), []byte(sweApply), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := buildTemplateIn(t, cli, tag, ctx, "FROM BASE\nCOPY repo/ /opt/task/repo/\nCOPY apply.py /opt/task/apply.py\n"); err != nil {
		t.Fatalf("build.sh template: %v\n%s", err, stderr)
	}
	// Registered as `submit template add` registers it: the worker's
	// watch of the registry hands the executor what this hands it.
	e := setup(t, nil)
	e.SetTemplates(map[string]*templates.Template{"swe-calc": {Name: "swe-calc", Image: tag, MainFile: "main.sh",
		Argv: []string{"bash", "main.sh"}, Version: 7}})
	for _, c := range candidates {
		res := run(t, e, job(sweJudge, func(j *jobs.Job) {
			j.Image = "swe-calc"
			j.Files = map[string]string{"candidate.patch": c.patch}
		}))
		if res.Template == nil || res.Template.Name != "swe-calc" || res.Template.Version != 7 || res.Template.Digest == "" {
			t.Errorf("%s: the result names the template %+v, want swe-calc version 7 with its image's digest", c.name, res.Template)
		}
		got := -1 // none: the job did not run to its end
		if res.Exit != nil {
			got = *res.Exit
		}
		if got != c.exit {
			t.Errorf("%s: status %s, exit code %d, want %d; stdout %q, stderr %q", c.name, res.Status, got, c.exit, res.Stdout, res.Stderr)
			continue
		}
		t.Logf("%s: exit %d (%s)", c.name, c.exit, map[bool]string{true: "pass", false: "fail"}[c.exit == 0])
	}
}
