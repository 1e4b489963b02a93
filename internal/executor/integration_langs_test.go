package executor

// The languages' presets on the real langs image (sandbox-image/build.sh
// langs): each compiles and runs a program judged by a test case, reports
// a compile error as such, and is held by the wall clock, the memory limit
// and the output cap under the sandbox's read-only root, without network
// and within the pids limit. SANDFLEET_TEST_LANGS_IMAGE names the image
// (default LangsImage); without it the tests skip, saying how to build it,
// unless SANDFLEET_REQUIRE_LANGS=1.

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// langProgram is one language's programs for the tests.
type langProgram struct {
	preset string
	sum    string // reads two ints from stdin, prints their sum
	broken string // does not compile ("" for node: no compile step)
	spin   string // loops forever
	hog    string // allocates and touches 1 GiB
	flood  string // writes forever
}

var langPrograms = []langProgram{
	{
		preset: "node",
		sum:    `const [a, b] = require("fs").readFileSync(0, "utf8").trim().split(/\s+/).map(Number); console.log(a + b);`,
		spin:   `for (;;) {}`,
		hog:    `const a = []; for (;;) a.push(new Array(1 << 20).fill(1));`,
		flood:  `const fs = require("fs"); const s = "x".repeat(65536); for (;;) fs.writeSync(1, s);`,
	},
	{
		preset: "c",
		sum:    "#include <stdio.h>\nint main(void){long a,b; if(scanf(\"%ld %ld\",&a,&b)!=2) return 1; printf(\"%ld\\n\",a+b); return 0;}\n",
		broken: "int main(void){ return x; }\n",
		spin:   "int main(void){ volatile int x = 0; for(;;) x++; }\n",
		hog:    "#include <stdlib.h>\n#include <string.h>\nint main(void){ for(;;){ char *p = malloc(1<<24); if(!p) return 3; memset(p, 1, 1<<24);} }\n",
		flood:  "#include <stdio.h>\nint main(void){ for(;;) fputs(\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\\n\", stdout); }\n",
	},
	{
		preset: "cpp",
		sum:    "#include <iostream>\nint main(){ long a, b; std::cin >> a >> b; std::cout << a + b << \"\\n\"; }\n",
		broken: "#include <vector>\nint main(){ std::vector<int> v = 3; }\n",
		spin:   "int main(){ volatile int x = 0; for(;;) x++; }\n",
		hog:    "#include <vector>\nint main(){ std::vector<std::vector<char>> v; for(;;) v.emplace_back(1<<24, 1); }\n",
		flood:  "#include <iostream>\nint main(){ for(;;) std::cout << \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\\n\"; }\n",
	},
	{
		preset: "java",
		sum:    "import java.util.*;\npublic class Main { public static void main(String[] a) { Scanner s = new Scanner(System.in); System.out.println(s.nextLong() + s.nextLong()); } }\n",
		broken: "public class Main { public static void main(String[] a) { int x = \"s\"; } }\n",
		spin:   "public class Main { public static void main(String[] a) { long x = 0; for (;;) x++; } }\n",
		hog:    "import java.util.*;\npublic class Main { public static void main(String[] a) { List<byte[]> l = new ArrayList<>(); for (;;) l.add(new byte[1 << 24]); } }\n",
		flood:  "public class Main { public static void main(String[] a) { for (;;) System.out.println(\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"); } }\n",
	},
	{
		preset: "go",
		sum:    "package main\nimport \"fmt\"\nfunc main() { var a, b int64; fmt.Scan(&a, &b); fmt.Println(a + b) }\n",
		broken: "package main\nfunc main() { x := 1 }\n",
		spin:   "package main\nfunc main() { for {} }\n",
		hog:    "package main\nfunc main() { var l [][]byte; for { b := make([]byte, 1<<24); for i := range b { b[i] = 1 }; l = append(l, b) } }\n",
		flood:  "package main\nimport \"os\"\nfunc main() { b := make([]byte, 65536); for { os.Stdout.Write(b) } }\n",
	},
	{
		preset: "rust",
		sum:    "use std::io::Read;\nfn main() { let mut s = String::new(); std::io::stdin().read_to_string(&mut s).unwrap(); let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect(); println!(\"{}\", v[0] + v[1]); }\n",
		broken: "fn main() { let x: i32 = \"s\"; }\n",
		spin:   "fn main() { let mut x: u64 = 1; loop { x = x.wrapping_mul(3).wrapping_add(1); if x == 0 { println!(\"{}\", x); } } }\n",
		hog:    "fn main() { let mut l = Vec::new(); loop { l.push(vec![1u8; 1 << 24]); } }\n",
		flood:  "use std::io::Write;\nfn main() { let b = [b'x'; 65536]; let mut o = std::io::stdout(); loop { o.write_all(&b).unwrap(); } }\n",
	},
}

// langsSetup is judgeSetup once the langs image is known to be there.
func langsSetup(t *testing.T) *Executor {
	t.Helper()
	needLangsImage(t)
	return judgeSetup(t)
}

// needLangsImage skips the test, or fails it with SANDFLEET_REQUIRE_LANGS=1,
// when the languages' image is not there.
func needLangsImage(t *testing.T) {
	t.Helper()
	img := os.Getenv("SANDFLEET_TEST_LANGS_IMAGE")
	if img == "" {
		img = LangsImage
	}
	cli := requireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.ImageInspect(ctx, img); err != nil {
		msg := "needs the languages' image " + img + " (make images-all, or SANDBOX_IMAGE=TAG ./sandbox-image/build.sh langs and SANDFLEET_TEST_LANGS_IMAGE=TAG): " + err.Error()
		if os.Getenv("SANDFLEET_REQUIRE_LANGS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

func TestIntegrationLanguages(t *testing.T) {
	t.Parallel()
	e := langsSetup(t)
	for _, lp := range langPrograms {
		t.Run(lp.preset, func(t *testing.T) {
			t.Parallel()
			lang := func(code string, mod ...func(*jobs.Job)) *jobs.Job {
				return job(code, append([]func(*jobs.Job){func(j *jobs.Job) { j.Image = lp.preset }}, mod...)...)
			}
			timeout := limits.Duration(60e9)
			res := run(t, e, lang(lp.sum, withLimits(limits.Limits{Timeout: timeout}), func(j *jobs.Job) {
				j.Tests = []jobs.TestCase{{Stdin: "40 2\n", ExpectedStdout: "42\n"}, {Stdin: "-1 1", ExpectedStdout: "0\n"}}
			}))
			if res.Status != jobs.StatusSucceeded || res.Tests == nil || res.Tests.Passed != 2 {
				t.Fatalf("sum: %s (%s); compile %+v; tests %+v; stderr %q", res.Status, res.Error, res.Compile, res.Tests, res.Stderr)
			}
			t.Logf("sum: %d ms in all, compile %v, cases %d+%d ms, peak %v", *res.DurationMS, compileMS(res),
				*res.Tests.Cases[0].DurationMS, *res.Tests.Cases[1].DurationMS, res.Tests.Cases[0].PeakMemoryBytes)

			if lp.broken != "" {
				res := run(t, e, lang(lp.broken, withLimits(limits.Limits{Timeout: timeout})))
				if res.Status != jobs.StatusCompileErr || res.Compile == nil || res.Compile.Output == "" {
					t.Errorf("broken: %s (%s), compile %+v", res.Status, res.Error, res.Compile)
				}
			}
			// Held by the wall clock: the job's own (the compile step counts).
			res = run(t, e, lang(lp.spin, withLimits(limits.Limits{Timeout: limits.Duration(20e9)})))
			if res.Status != jobs.StatusTimeout {
				t.Errorf("spin: %s (%s), want timeout", res.Status, res.Error)
			}
			// And by a case's.
			res = run(t, e, lang(lp.spin, withLimits(limits.Limits{Timeout: timeout}), func(j *jobs.Job) {
				j.Tests = []jobs.TestCase{{Timeout: limits.Duration(2e9)}}
			}))
			if res.Status != jobs.StatusFailed || res.Tests == nil || res.Tests.Cases[0].Verdict != jobs.CaseTimeout {
				t.Errorf("spin, judged: %s (%s), %+v", res.Status, res.Error, res.Tests)
			}
			// Memory: 1 GiB wanted, 256 MiB allowed. The JVM's heap is half
			// the limit: an OutOfMemoryError, a failure of its own.
			res = run(t, e, lang(lp.hog, withLimits(limits.Limits{Timeout: timeout, Memory: 256 << 20})))
			if res.Status != jobs.StatusOOM && !(lp.preset == "java" && res.Status == jobs.StatusFailed && strings.Contains(res.Stderr, "OutOfMemoryError")) &&
				!(res.Status == jobs.StatusFailed && lp.preset != "java") {
				t.Errorf("hog: %s (%s), want oom; stderr %q", res.Status, res.Error, res.Stderr)
			}
			res = run(t, e, lang(lp.flood, withLimits(limits.Limits{Timeout: timeout, Output: 64 << 10})))
			if res.Status != jobs.StatusOutputLimit || len(res.Stdout) != 64<<10 {
				t.Errorf("flood: %s (%s), %d bytes kept", res.Status, res.Error, len(res.Stdout))
			}
		})
	}
}

func compileMS(r *jobs.Result) any {
	if r.Compile == nil {
		return "none"
	}
	return r.Compile.DurationMS
}
