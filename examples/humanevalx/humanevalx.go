// Package humanevalx turns HumanEval-X problems (THUDM/CodeGeeX's
// multilingual HumanEval: humaneval_{python,cpp,java,js,go,rust}.jsonl.gz)
// into sandfleet jobs, one per problem and language: the problem's
// declaration, a solution and its tests as one program of the language's
// preset, which exits 0 exactly when the tests pass. The data is not part
// of the repository (see docs/evals.md, "HumanEval-X").
package humanevalx

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// Problem is one line of a HumanEval-X file.
type Problem struct {
	TaskID            string `json:"task_id"`
	Prompt            string `json:"prompt"`
	Declaration       string `json:"declaration"`
	CanonicalSolution string `json:"canonical_solution"`
	Test              string `json:"test"`
	TestSetup         string `json:"test_setup"` // go
	Import            string `json:"import"`     // go
}

// Languages are HumanEval-X's, by file name, with the preset each runs on.
var Languages = map[string]string{
	"python": "python", "cpp": "cpp", "java": "java", "js": "node", "go": "go", "rust": "rust",
}

// LanguageOrder is the order runs and reports use.
var LanguageOrder = []string{"python", "cpp", "java", "js", "go", "rust"}

// File is where a language's problems are under dir.
func File(dir, lang string) string { return filepath.Join(dir, "humaneval_"+lang+".jsonl.gz") }

// Read reads a language's file (gzipped JSONL).
func Read(path string) ([]Problem, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var ps []Problem
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		var p Problem
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		ps = append(ps, p)
	}
	return ps, sc.Err()
}

// broken is a first statement that makes any solution fail at run time
// while it still compiles: each language's way to fail loudly.
var broken = map[string]string{
	"python": "    raise AssertionError('broken on purpose')\n",
	"cpp":    "    abort();\n",
	"java":   "        if (true) throw new RuntimeException(\"broken on purpose\");\n",
	"js":     "  throw new Error('broken on purpose');\n",
	"go":     "    panic(\"broken on purpose\")\n",
	"rust":   "    panic!(\"broken on purpose\");\n",
}

// strictAssert makes console.assert throw: HumanEval-X's JavaScript tests
// use it, and Node's only prints a failed one.
const strictAssert = "console.assert = (ok, ...msg) => { if (!ok) { throw new Error('Assertion failed: ' + msg.join(' ')); } };\n"

// Job is the job of problem p in lang with its canonical solution, or a
// broken one. id names it.
func Job(lang string, p Problem, isBroken bool, id string, timeout limits.Duration) (*jobs.Job, error) {
	preset, ok := Languages[lang]
	if !ok {
		return nil, fmt.Errorf("unknown language %q", lang)
	}
	sol := p.CanonicalSolution
	if isBroken {
		sol = broken[lang] + sol
	}
	j := &jobs.Job{ID: id, Image: preset, Labels: map[string]string{
		"suite": "humaneval-x", "language": lang, "task_id": p.TaskID,
	}}
	j.Limits.Timeout = timeout
	switch lang {
	case "python":
		j.Code = p.Prompt + sol + "\n" + p.Test + "\n"
	case "cpp", "java":
		j.Code = p.Declaration + sol + "\n" + p.Test + "\n"
	case "js":
		j.Code = strictAssert + p.Declaration + sol + "\n" + p.Test + "\n"
	case "go":
		// A test file of package main: go test -c builds it into a test
		// binary, which exits 1 when a test fails.
		j.Files = map[string]string{"main_test.go": goProgram(p, sol)}
		j.Code = "package main\n\nfunc main() {}\n"
		j.Compile = []string{"sandfleet-go", "test", "-vet=off", "-c", "-o", "/tmp/main.test", "main.go", "main_test.go"}
		j.Argv = []string{"/tmp/main.test"}
	case "rust":
		// The tests are a #[cfg(test)] module: rustc --test runs them.
		j.Code = p.Declaration + sol + "\n}\n" + p.Test + "\nfn main() {}\n"
		if braces(p.Declaration+p.CanonicalSolution) == 0 {
			j.Code = p.Declaration + sol + "\n" + p.Test + "\nfn main() {}\n"
		}
		j.Compile = []string{"sandfleet-rustc", "--test", "-o", "/tmp/main", "main.rs"}
		j.Argv = []string{"/tmp/main"}
	}
	return j, nil
}

// goStd are the standard packages a Go problem may use without its
// import field naming them, by the name code refers to them with.
var goStd = map[string]string{
	"math": "math", "strings": "strings", "strconv": "strconv", "sort": "sort", "fmt": "fmt",
	"time": "time", "unicode": "unicode", "bytes": "bytes", "regexp": "regexp", "rand": "math/rand",
	"md5": "crypto/md5", "hex": "encoding/hex", "reflect": "reflect", "utf8": "unicode/utf8",
}

// lineComment matches a // comment to the end of its line.
var lineComment = regexp.MustCompile(`//[^\n]*`)

// importLine matches one import path in an import block.
var importLine = regexp.MustCompile(`"([^"]+)"`)

// goProgram is a Go problem's test file. HumanEval-X's import fields
// disagree with its programs (a package imported twice, one used and not
// imported, one imported and not used), which Go refuses to compile; so,
// as goimports would: one import block of the test setup's and the
// problem's imports and the standard packages the code uses, less those
// it does not use.
func goProgram(p Problem, sol string) string {
	body := p.Prompt
	if imp := strings.TrimSpace(p.Import); imp != "" {
		if i := strings.Index(body, imp); i >= 0 {
			body = body[:i] + body[i+len(imp):]
		}
	}
	body += sol + "\n" + p.Test + "\n"
	seen := map[string]bool{}
	var paths []string
	add := func(path string) {
		if !seen[path] {
			seen[path] = true
			paths = append(paths, path)
		}
	}
	for _, block := range []string{p.TestSetup, p.Import} {
		for _, m := range importLine.FindAllStringSubmatch(block, -1) {
			add(m[1])
		}
	}
	code := lineComment.ReplaceAllString(body, "") // a package named in a comment is not used
	uses := func(name string) bool {
		return regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\.`).MatchString(code)
	}
	for _, name := range slices.Sorted(maps.Keys(goStd)) {
		if uses(name) {
			add(goStd[name])
		}
	}
	var b strings.Builder
	b.WriteString("package main\n\nimport (\n")
	for _, path := range paths {
		if path == "testing" || path == "github.com/stretchr/testify/assert" || uses(path[strings.LastIndexByte(path, '/')+1:]) {
			fmt.Fprintf(&b, "    %q\n", path)
		}
	}
	b.WriteString(")\n")
	b.WriteString(body)
	return b.String()
}

// braces is the count of '{' minus '}' in s, roughly (strings and
// comments are not told apart: enough to see whether a solution closes
// its function).
func braces(s string) int { return strings.Count(s, "{") - strings.Count(s, "}") }

// Write writes the jobs of problems ps in lang to w as JSONL: canonical
// solutions or broken ones, with IDs <prefix><n>, or none when prefix is
// "" (submit batch derives them from the content: a changed program is a
// new job). limit > 0 keeps the first
// limit problems.
func Write(w io.Writer, lang string, ps []Problem, isBroken bool, prefix string, timeout limits.Duration, limit int) (int, error) {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	n := 0
	for _, p := range ps {
		if limit > 0 && n >= limit {
			break
		}
		id := ""
		if prefix != "" {
			id = prefix + p.TaskID[strings.LastIndexByte(p.TaskID, '/')+1:]
		}
		j, err := Job(lang, p, isBroken, id, timeout)
		if err != nil {
			return n, err
		}
		if err := enc.Encode(j); err != nil {
			return n, err
		}
		n++
	}
	return n, bw.Flush()
}
