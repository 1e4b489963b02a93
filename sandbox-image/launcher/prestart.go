package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// An interpreter started before the job is known. A warm sandbox spends
// most of a short Python job starting python3 (on a loaded host, hundreds
// of milliseconds: tools/bench phase (m)), and nothing of that start
// depends on the job. So when the image asks for it (SANDFLEET_PRESTART=
// python3 in its environment), the launcher starts python3 while it waits
// for its envelope, with the job's pipes as its stdout and stderr and the
// container's stdin as its stdin, blocked on a pipe of its own (fd 3) that
// carries nothing until the job arrives. A job whose command is `python3
// SCRIPT ...` and whose environment changes nothing python3 reads at
// start then runs in that process: the launcher writes the script, the
// argv, the directory and the environment to fd 3 and closes it, and the
// stub runs the script as python3 would have. Any other job gets a fresh
// process, and the waiting interpreter is killed.
//
// Nothing else changes: the job is still the launcher's only child but for
// what it forks, the sandbox still serves one job, the pipes are still the
// launcher's, and the interpreter never sees the envelope's key (it reads
// fd 0 only once the job runs, after the launcher has consumed the
// envelope). The job's CPU figures include the interpreter's start, as
// they did.
const prestartEnv = "SANDFLEET_PRESTART"

// prestartPreloadEnv names modules, space-separated, that the waiting
// interpreter imports before its job arrives: an image whose libraries
// take long to import (the data image's numpy, pandas and matplotlib)
// has them imported while the sandbox waits. What they read of the
// environment as they import, they read from the image's: so a job whose
// environment differs from it in anything gets a fresh process (fits).
// One that fails to import is skipped; the job's own import then fails as
// it would have.
const prestartPreloadEnv = "SANDFLEET_PRESTART_PRELOAD"

// prestartStub is the program of the waiting interpreter. It imports
// nothing python3 has not already imported at start (os and sys) and
// leaves no name behind, so that the job finds the interpreter as `python3
// SCRIPT` leaves it: the script runs in a cleared __main__ with __file__,
// sys.argv and sys.path[0] as python3 sets them, an uncaught exception's
// traceback starts at the script (a syntax error's, as python3 prints it),
// and a missing script exits 2 with python3's message. What differs:
// __main__.__loader__ is None, and an uncaught KeyboardInterrupt exits 1,
// not by SIGINT. The payload is NUL-separated: the directory, the count
// of arguments after python3, those arguments, the environment's
// KEY=VALUE pairs.
const prestartStub = `def _sandfleet_go():
    import os, sys
    for m in sys.argv[1:]:
        try:
            __import__(m)
        except Exception:
            pass
    # Taken now: the script may rebind sys.exit or builtins.SystemExit, and
    # python3 exits 1 after an uncaught exception whatever it did to them.
    exit_ = SystemExit
    b = b""
    while True:
        c = os.read(3, 65536)
        if not c:
            break
        b += c
    os.close(3)
    if not b:
        os._exit(125)
    f = [x.decode("utf-8", "surrogateescape") for x in b.split(b"\0")]
    n = int(f[1])
    d, argv, env = f[0], f[2:2 + n], f[2 + n:]
    os.chdir(d)
    os.environ.clear()
    for kv in env:
        k, _, v = kv.partition("=")
        os.environ[k] = v
    path = os.path.abspath(argv[0])
    sys.argv = argv
    sys.path[0] = os.path.dirname(path)
    try:
        with open(path, "rb") as s:
            src = s.read()
    except OSError as e:
        sys.stderr.write("python3: can't open file %r: [Errno %d] %s\n" % (path, e.errno, e.strerror))
        raise exit_(2)
    g = sys.modules["__main__"].__dict__
    bi = g["__builtins__"]
    g.clear()
    g.update(__name__="__main__", __doc__=None, __package__=None, __spec__=None, __loader__=None,
             __file__=path, __cached__=None, __builtins__=bi, __annotations__={})
    try:
        exec(compile(src, path, "exec"), g)
    except exit_:
        raise
    except BaseException as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
            tb = tb.tb_next
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        raise exit_(1)
_sandfleet_go()
`

// prestarted is the waiting interpreter: its pid, the read ends of its
// stdout and stderr, and the write end of its fd 3.
type prestarted struct {
	pid        int
	path       string
	started    map[string]string // the environment it started with
	preloaded  bool              // it imported modules of prestartPreloadEnv
	outR, errR *os.File
	goW        *os.File
}

// prestart starts the waiting interpreter when the image asks for it, or
// returns nil.
func prestart(dir string) *prestarted {
	if os.Getenv(prestartEnv) != "python3" {
		return nil
	}
	env := buildEnv(os.Environ(), nil, dir)
	path, err := lookPath("python3", env)
	if err != nil {
		return nil
	}
	var p prestarted
	var outW, errW, goR *os.File
	if p.outR, outW, err = os.Pipe(); err != nil {
		return nil
	}
	if p.errR, errW, err = os.Pipe(); err != nil {
		p.outR.Close()
		outW.Close()
		return nil
	}
	if goR, p.goW, err = os.Pipe(); err != nil {
		p.outR.Close()
		outW.Close()
		p.errR.Close()
		errW.Close()
		return nil
	}
	p.path = path
	p.started = map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			p.started[k] = v
		}
	}
	argv := []string{"python3", "-c", prestartStub}
	preload := strings.Fields(os.Getenv(prestartPreloadEnv))
	argv = append(argv, preload...)
	p.preloaded = len(preload) > 0
	p.pid, err = syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: []uintptr{0, outW.Fd(), errW.Fd(), goR.Fd()},
	})
	outW.Close()
	errW.Close()
	goR.Close()
	if err != nil {
		p.outR.Close()
		p.errR.Close()
		p.goW.Close()
		return nil
	}
	return &p
}

// fits reports whether a job with this command and environment can run in
// the waiting interpreter: `python3 SCRIPT ...`, resolved to the same
// binary, with no change to what python3 reads as it starts: a variable it
// reads may be set only to the value it started with (the image gives it
// the executor's deterministic defaults, which every job carries). After a
// preload any variable may have been read, so none may change.
func (p *prestarted) fits(argv []string, jobEnv map[string]string, env []string) bool {
	if p == nil || len(argv) < 2 || argv[0] != "python3" || argv[1] == "" || strings.HasPrefix(argv[1], "-") {
		return false
	}
	if path, err := lookPath(argv[0], env); err != nil || path != p.path {
		return false
	}
	for k, v := range jobEnv {
		read := p.preloaded || strings.HasPrefix(k, "PYTHON") || strings.HasPrefix(k, "LC_") || k == "LANG" || k == "LANGUAGE" || k == "HOME"
		if was, ok := p.started[k]; read && (!ok || was != v) {
			return false // python3 read it at start, as something else
		}
	}
	return true
}

// hand gives the job to the interpreter; false when it is gone (the
// caller discards it and starts a fresh process).
func (p *prestarted) hand(dir string, argv, env []string) bool {
	fields := append([]string{dir, strconv.Itoa(len(argv) - 1)}, argv[1:]...)
	_, err := p.goW.Write([]byte(strings.Join(append(fields, env...), "\x00")))
	cerr := p.goW.Close()
	return err == nil && cerr == nil
}

// discard kills the interpreter (the reaping loop collects it) and closes
// its pipes.
func (p *prestarted) discard() {
	if p == nil {
		return
	}
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	p.outR.Close()
	p.errR.Close()
	p.goW.Close()
}
