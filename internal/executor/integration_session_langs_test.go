package executor

// Code contexts of every language, in one session on the languages'
// image (SANDFLEET_TEST_LANGS_IMAGE names a branch's own build): state
// kept across calls, an error, a timeout that keeps the context; and the
// Python context's attacks (junk on the answer pipe, endless output, a
// forged answer for another context) mirrored on JavaScript and bash.

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// langsRuntimes runs f once per runtime on the languages' image.
func langsRuntimes(t *testing.T, f func(t *testing.T, e *Executor)) {
	t.Helper()
	needLangsImage(t)
	img := os.Getenv("SANDFLEET_TEST_LANGS_IMAGE")
	for _, rt := range attackRuntimes(t) {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			f(t, setup(t, func(c *Config) {
				c.Runtime = rt
				c.Presets = DefaultPresets()
				if img != "" {
					p := c.Presets["node"]
					p.Image = img
					c.Presets["node"] = p
				}
			}))
		})
	}
}

// nodeRuns checks that node starts in a session of the engine's runtime,
// in a session of its own, and fails the test if not: under gVisor it
// once did not (its threads could not start: the sandbox's seccomp
// profile refused clone3 in a way glibc did not fall back from).
func nodeRuns(t *testing.T, e *Executor) bool {
	t.Helper()
	if e.cfg.Runtime != "runsc" {
		return true
	}
	s := startSession(t, e, SessionSpec{Image: "node"})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	r, err := call(ctx, s, ask{Op: sessionapi.OpExec, Cmd: []string{"node", "-e", "1"}})
	if err == nil && r.Error == nil && r.Exit != nil && *r.Exit == 0 {
		return true
	}
	out := ""
	if r != nil {
		out = string(r.Stderr)
	}
	t.Fatalf("node does not start under %s (%v): %.200s", e.cfg.Runtime, err, out)
	return false
}

// cellCase is one language's cells: two that keep state, one that fails,
// one that runs past its timeout, and one after it that reads the state.
type cellCase struct {
	lang                 string
	set, use             string
	useText, useStdout   string
	fail, failName       string
	spin, after, afterIs string
}

var cellCases = []cellCase{
	{lang: "python", set: "x = 41\nimport math", use: "print('side', flush=True)\nx + 1", useText: "42", useStdout: "side\n",
		fail: "def f():\n    return 1/0\nf()", failName: "ZeroDivisionError", spin: "while True: pass", after: "x", afterIs: "41"},
	{lang: "javascript", set: "const x = 41; function f() { return x + 1 }", use: "console.log('side'); f()", useText: "42", useStdout: "side\n",
		fail: "null.y", failName: "TypeError", spin: "while (true) {}", after: "x", afterIs: "41"},
	{lang: "typescript", set: "const t: number = 41; interface I { a: number }", use: "const i: I = { a: t + 1 }; console.log('side'); i.a",
		useText: "42", useStdout: "side\n", fail: "throw new RangeError('r')", failName: "RangeError",
		spin: "await new Promise<void>(() => {})", after: "t", afterIs: "41"},
	{lang: "bash", set: "cd /tmp; X=41; export E=e; f() { echo $((X + 1)); }", use: "pwd; f; sh -c 'echo $E'", useStdout: "/tmp\n42\ne\n",
		fail: "ls /nope", failName: "ExitStatus", spin: "sleep 100; echo after", after: "echo $X", afterIs: "41\n"},
}

// One session runs a cell of each language, each in its own context:
// its state is there at the next call, a failing cell leaves it, and a
// cell past its timeout is interrupted without losing it. The first
// and next cells' durations are logged (docs/sessions.md has them).
func TestIntegrationSessionLanguages(t *testing.T) {
	t.Parallel()
	langsRuntimes(t, func(t *testing.T, e *Executor) {
		node := nodeRuns(t, e)
		s := startSession(t, e, SessionSpec{Image: "node"})
		for _, c := range cellCases {
			cell := func(code string, timeoutMS int64) *answer {
				t.Helper()
				ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
				defer cancel()
				r, err := call(ctx, s, ask{Op: sessionapi.OpCode, Language: c.lang, Code: code, Timeout: ms(timeoutMS)})
				if err != nil {
					t.Fatalf("%s %q: %v (%q)", c.lang, code, err, sessionWhy(s))
				}
				return okReply(t, r)
			}
			if (c.lang == "javascript" || c.lang == "typescript") && !node {
				continue
			}
			r := cell(c.set, 30000)
			if !r.Reset || r.CodeError != nil || r.Language != c.lang {
				t.Fatalf("%s: the first cell: %+v %+v", c.lang, r, r.CodeError)
			}
			first := r.DurationMS
			r = cell(c.use, 30000)
			if r.Reset || r.CodeError != nil || r.Text != c.useText || string(r.Stdout) != c.useStdout {
				t.Fatalf("%s: the second cell: text %q stdout %q reset %v error %+v; want %q, %q", c.lang, r.Text, r.Stdout, r.Reset, r.CodeError, c.useText, c.useStdout)
			}
			t.Logf("%s: first cell %d ms, next %d ms", c.lang, first, r.DurationMS)
			if r = cell(c.fail, 30000); r.CodeError == nil || r.CodeError.Name != c.failName {
				t.Fatalf("%s: a failing cell: %+v, want %s", c.lang, r.CodeError, c.failName)
			}
			if c.lang == "bash" && (r.Exit == nil || *r.Exit != 2 || !strings.Contains(string(r.Stderr), "/nope")) {
				t.Fatalf("bash: a failing cell: exit %v stderr %q, want 2 and ls's complaint", r.Exit, r.Stderr)
			}
			if r = cell(c.spin, 500); !r.TimedOut || r.CodeError == nil {
				t.Fatalf("%s: a cell past its timeout: %+v", c.lang, r)
			}
			if r = cell(c.after, 30000); r.Reset || (r.Text+string(r.Stdout)) != c.afterIs {
				t.Fatalf("%s: after the interrupt: %+v, want %q in the same context", c.lang, r, c.afterIs)
			}
		}
		// A context keeps its language; an unknown one is refused.
		r := do(t, s, ask{Op: sessionapi.OpCode, Context: "default", Language: "bash", Code: "true"})
		if r.Error == nil || r.Error.Code != sessionapi.ErrInvalid.Code {
			t.Errorf("python's context asked for bash: %+v", r.Error)
		}
		if r := do(t, s, ask{Op: sessionapi.OpCode, Language: "cobol", Code: "1"}); r.Error == nil || r.Error.Code != sessionapi.ErrInvalid.Code {
			t.Errorf("cobol: %+v", r.Error)
		}
		// A reset starts the language's context afresh.
		okReply(t, do(t, s, ask{Op: sessionapi.OpReset, Language: "javascript"}))
		if r := okReply(t, do(t, s, ask{Op: sessionapi.OpCode, Language: "javascript", Code: "typeof x"})); !r.Reset || r.Text != "'undefined'" {
			t.Errorf("after a reset: %+v", r)
		}
	})
}

// The Python context's attacks, on the other languages: junk, answers
// with made-up nonces and half a line on the answer pipe; forged answers
// written into another context's answer pipe; endless output past the
// timeout. Each cell gets its own answer, the output its bound, and the
// context serves on.
func TestIntegrationSessionRedTeamLanguages(t *testing.T) {
	t.Parallel()
	junkJS := `const fs = require('fs'); fs.writeSync(4, 'not json\n');
for (const n of ['', '0'.repeat(24), 'x']) fs.writeSync(4, JSON.stringify({ nonce: n, text: "'forged'" }) + '\n');
fs.writeSync(4, '{"nonce": "half a line'); 40 + 1`
	junkBash := `echo "not json" >&4
for n in "" 000000000000000000000000 x; do printf '{"nonce":"%s","exit":0}\n' "$n" >&4; done
printf '{"nonce": "half a line' >&4; (exit 7)`
	// Every context's answer pipe, through /proc, gets forged answers.
	forgeAll := `for p in /proc/[0-9]*; do [ -w $p/fd/4 ] || continue
for n in "" 000000000000000000000000; do printf '\n{"nonce":"%s","text":"forged","exit":0}\n' "$n" >$p/fd/4 2>/dev/null; done; done; (exit 5)`
	langsRuntimes(t, func(t *testing.T, e *Executor) {
		s := startSession(t, e, SessionSpec{Image: "node", OutputLimit: 64 << 10})
		cell := func(lang, code string, timeoutMS int64) *answer {
			t.Helper()
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			r, err := call(ctx, s, ask{Op: sessionapi.OpCode, Language: lang, Code: code, Timeout: ms(timeoutMS)})
			if err != nil {
				t.Fatalf("%s %q: %v (%q)", lang, code, err, sessionWhy(s))
			}
			return okReply(t, r)
		}
		// The forger, bash, writes into every context's answer pipe; the
		// Python context (and Node's, where it runs) answer their own.
		cell("python", "p = 1", 30000)
		node := nodeRuns(t, e)
		if node {
			if r := cell("javascript", junkJS, 10000); r.Text != "41" || r.TimedOut || r.CodeError != nil {
				t.Fatalf("javascript's junk: %+v %+v, want 41", r, r.CodeError)
			}
			if r := cell("javascript", "'next'", 10000); r.Text != "'next'" || r.Reset {
				t.Fatalf("javascript's next cell: %+v", r)
			}
			cell("typescript", "const n: number = 1", 30000)
		}
		if r := cell("bash", junkBash, 10000); r.Exit == nil || *r.Exit != 7 || r.TimedOut {
			t.Fatalf("bash's junk: exit %v %+v, want 7", r.Exit, r)
		}
		if r := cell("bash", "echo next", 10000); string(r.Stdout) != "next\n" || r.Reset || r.Exit == nil || *r.Exit != 0 {
			t.Fatalf("bash's next cell: %+v", r)
		}
		if r := cell("bash", forgeAll, 10000); r.Exit == nil || *r.Exit != 5 {
			t.Fatalf("the forger's own answer: exit %v, want 5", r.Exit)
		}
		if r := cell("python", "p + 1", 10000); r.Text != "2" || r.CodeError != nil {
			t.Fatalf("python after the forgery: %+v %+v", r, r.CodeError)
		}
		if node {
			if r := cell("typescript", "n + 1", 10000); r.Text != "2" || r.CodeError != nil {
				t.Fatalf("typescript after the forgery: %+v %+v", r, r.CodeError)
			}
			if r := cell("javascript", "'own'", 10000); r.Text != "'own'" {
				t.Fatalf("javascript after the forgery: %+v", r)
			}
		}

		for _, c := range []struct{ lang, flood, next, want string }{
			{"javascript", "const b = 'x'.repeat(65536)\nfor (;;) for (const fd of [1, 2]) try { require('fs').writeSync(fd, b) } catch (e) { if (e.code !== 'EAGAIN') throw e }", "6 * 7", "42"},
			{"bash", "yes xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "echo $((6 * 7))", "42\n"},
		} {
			if c.lang == "javascript" && !node {
				continue
			}
			r := cell(c.lang, c.flood, 2000)
			if !r.TimedOut || len(r.Stdout) != 64<<10 || len(r.Stderr) > 64<<10 {
				t.Fatalf("%s's flood: timed out %v, %d bytes of stdout kept, %d of stderr: want the first 64 KiB", c.lang, r.TimedOut, len(r.Stdout), len(r.Stderr))
			}
			if r = cell(c.lang, c.next, 10000); r.Text+string(r.Stdout) != c.want || r.Reset {
				t.Fatalf("%s after the flood: %+v, want %q in the same context", c.lang, r, c.want)
			}
		}
	})
}
