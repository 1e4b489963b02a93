package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestPrestartFits(t *testing.T) {
	env := []string{"PATH=" + os.Getenv("PATH")}
	py, err := lookPath("python3", env)
	if err != nil {
		t.Skip("no python3 on PATH")
	}
	p := &prestarted{path: py, started: map[string]string{"LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}}
	for _, tc := range []struct {
		name string
		argv []string
		env  map[string]string
		want bool
	}{
		{"the preset's command", []string{"python3", "main.py"}, nil, true},
		{"arguments after the script", []string{"python3", "main.py", "-x", ""}, nil, true},
		{"an environment python3 ignores at start", []string{"python3", "main.py"}, map[string]string{"FOO": "1"}, true},
		{"a flag", []string{"python3", "-u", "main.py"}, nil, false},
		{"no script", []string{"python3"}, nil, false},
		{"another command", []string{"sh", "main.sh"}, nil, false},
		{"a path to python3", []string{"/usr/bin/python3", "main.py"}, nil, false},
		{"PYTHONPATH", []string{"python3", "main.py"}, map[string]string{"PYTHONPATH": "/x"}, false},
		{"a locale", []string{"python3", "main.py"}, map[string]string{"LC_ALL": "C"}, false},
		{"HOME", []string{"python3", "main.py"}, map[string]string{"HOME": "/tmp"}, false},
		{"what it started with", []string{"python3", "main.py"}, map[string]string{"LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "TZ": "UTC"}, true},
		{"another hash seed", []string{"python3", "main.py"}, map[string]string{"PYTHONHASHSEED": "1"}, false},
	} {
		if got := p.fits(tc.argv, tc.env, env); got != tc.want {
			t.Errorf("%s: fits(%q, %v) = %v, want %v", tc.name, tc.argv, tc.env, got, tc.want)
		}
	}
	if (*prestarted)(nil).fits([]string{"python3", "main.py"}, nil, env) {
		t.Error("no interpreter fits a job")
	}
	// Modules imported ahead may have read any variable: none may change.
	p.preloaded = true
	p.started["MPLBACKEND"] = "agg"
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{"LANG": "C.UTF-8", "MPLBACKEND": "agg"}, true},
		{map[string]string{"MPLBACKEND": "svg"}, false},
		{map[string]string{"OMP_NUM_THREADS": "4"}, false},
	} {
		if got := p.fits([]string{"python3", "main.py"}, tc.env, env); got != tc.want {
			t.Errorf("preloaded: fits(%v) = %v, want %v", tc.env, got, tc.want)
		}
	}
}

// TestPrestartRunsTheScript runs the stub in a real python3: the job finds
// what `python3 main.py` would give it, and its traceback starts at the
// script.
func TestPrestartRunsTheScript(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 on PATH")
	}
	t.Setenv(prestartEnv, "python3")
	t.Setenv("PYTHONDONTWRITEBYTECODE", "1")
	for _, tc := range []struct {
		name, code string
		status     int
		want       []string // in the output, stdout and stderr together
		not        []string
	}{
		{"namespace and argv", `import sys, os
print(sys.argv, __name__, __file__ == os.path.abspath("main.py"), sys.path[0] == os.getcwd())
print(sorted(k for k in globals() if not k.startswith("__")), os.environ.get("JOBVAR"), "` + prestartEnv + `" in os.environ)
print(repr(sys.stdin.read()))`, 0,
			[]string{"['main.py', 'a b', ''] __main__ True True", "['os', 'sys'] v False", "'job stdin'"}, nil},
		{"an uncaught exception", "def f():\n    raise ValueError('boom')\nf()\n", 1,
			[]string{"Traceback (most recent call last):\n  File \"", "main.py\", line 3, in <module>", "ValueError: boom"},
			[]string{"<string>", "_sandfleet"}},
		{"a syntax error", "x = (\n", 1, []string{"main.py\", line 1", "SyntaxError"}, []string{"<string>", "Traceback"}},
		{"sys.exit", "import sys; sys.exit(7)", 7, nil, nil},
		// python3 exits 1 after an uncaught exception, whatever the script
		// made of sys.exit and SystemExit (a harness's exit status is no
		// verdict against hostile code, but the stub must not make it
		// weaker than python3's).
		{"an uncaught exception with sys.exit rebound", `import sys
sys.exit = lambda *a: None
sys.excepthook = lambda *a: None
raise ValueError("boom")`, 1, nil, nil},
		{"an uncaught exception with sys.exit and SystemExit rebound", `import sys, builtins
real = SystemExit
sys.exit = lambda *a: None
sys.excepthook = lambda *a: None
builtins.SystemExit = lambda *a: real(0)
raise ValueError("boom")`, 1, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			// The interpreter's stdin is fd 0, the container's: a pipe here.
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			saved, err := syscall.Dup(0)
			if err != nil {
				t.Fatal(err)
			}
			_ = syscall.Dup2(int(r.Fd()), 0)
			p := prestart(dir)
			_ = syscall.Dup2(saved, 0)
			syscall.Close(saved)
			r.Close()
			if p == nil {
				t.Fatal("no interpreter started")
			}
			_, _ = w.WriteString("job stdin")
			w.Close()
			if err := os.WriteFile(filepath.Join(dir, "main.py"), []byte(tc.code), 0o644); err != nil {
				t.Fatal(err)
			}
			env := buildEnv(os.Environ(), map[string]string{"JOBVAR": "v"}, dir)
			argv := []string{"python3", "main.py", "a b", ""}
			if !p.fits(argv, nil, env) {
				t.Fatal("the job does not fit")
			}
			if !p.hand(dir, argv, env) {
				t.Fatal("hand failed")
			}
			out, _ := io.ReadAll(io.MultiReader(p.outR, p.errR))
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(p.pid, &ws, 0, nil); err != nil {
				t.Fatal(err)
			}
			if ws.ExitStatus() != tc.status {
				t.Errorf("exit %d, want %d; output:\n%s", ws.ExitStatus(), tc.status, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(string(out), w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}
}
