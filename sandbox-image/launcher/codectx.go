package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// A code context is a long-lived interpreter of the session: a cell's
// globals, imports and definitions are there for the next. Python runs
// pyDriver, which reads cells from fd 3 and answers on fd 4, one JSON
// line each; what a cell prints goes to the process's stdout and stderr,
// pipes the agent reads, so a subprocess's output is the cell's too.
//
// The driver runs in the same process as the cell's code, which can
// therefore say what it likes on fd 4: a cell's value and error are the
// interpreter's word, as its output is. The agent matches each answer to
// its cell by a nonce and skips any other line, so that such a cell
// cannot confuse the answers of the next; each answer starts on a line of
// its own, so that a cell that left half a line there does not swallow
// it. What the agent measures itself
// (an exec's exit status) nothing in the sandbox can forge.

// pyDriver is the Python side of a context.
const pyDriver = `
import ast, json, os, sys, traceback
_rq = os.fdopen(3, 'r', encoding='utf-8')
_rp = os.fdopen(4, 'w', encoding='utf-8')
_g = {'__name__': '__main__', '__builtins__': __builtins__}
def _cell(code):
    tree = ast.parse(code, '<cell>', 'exec')
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, '<cell>', 'exec'), _g)
    if last is not None:
        v = eval(compile(last, '<cell>', 'eval'), _g)
        if v is not None:
            _g['_'] = v
            return repr(v)
    return None
while True:
    try:
        line = _rq.readline()
    except KeyboardInterrupt:
        continue
    if not line:
        break
    try:
        m = json.loads(line)
        out = {'nonce': m['nonce']}
        try:
            t = _cell(m['code'])
            if t is not None:
                out['text'] = t
        except BaseException as e:
            tb = e.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename != '<cell>':
                tb = tb.tb_next
            out['error'] = {'name': type(e).__name__, 'value': str(e),
                            'traceback': ''.join(traceback.format_exception(type(e), e, tb))}
        try:
            sys.modules['sandfleet_display'].end_cell()  # the data image's figures
        except BaseException:
            pass
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except BaseException:
                pass
        _rp.write('\n' + json.dumps(out) + '\n')
        _rp.flush()
    except KeyboardInterrupt:
        continue
`

// interruptGrace is how long a cell has to stop after its SIGINT before
// its context is killed and started afresh on the next call.
const interruptGrace = 2 * time.Second

type codeContext struct {
	mu      sync.Mutex // one cell at a time
	lang    *language
	cwd     string    // where it started (and starts again if it dies)
	created time.Time // when its process started
	cells   atomic.Int64
	p       *proc
	req     *os.File
	answers *bufio.Reader
	rep     *os.File
	out     *cellSink
	// outR and errR are the read ends of its stdout and stderr, which
	// the pumps read: drain asks them what is still unread.
	outR, errR *os.File
}

// cellSink is where the context's output goes: to the cell running, if
// any, and as live events.
type cellSink struct {
	mu             sync.Mutex
	id             uint64
	stdout, stderr *capped
}

func (c *cellSink) set(id uint64, stdout, stderr *capped) {
	c.mu.Lock()
	c.id, c.stdout, c.stderr = id, stdout, stderr
	c.mu.Unlock()
}

func (a *agent) startContext(lang *language, cwd string) (*codeContext, error) {
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, err
	}
	p, _, outR, errR, err := a.spawn(lang.argv, cwd, a.env, false, reqR, repW)
	reqR.Close()
	repW.Close()
	if err != nil {
		reqW.Close()
		repR.Close()
		return nil, err
	}
	c := &codeContext{lang: lang, cwd: cwd, created: time.Now(), p: p, req: reqW, rep: repR, answers: bufio.NewReaderSize(repR, 64<<10), out: &cellSink{}, outR: outR, errR: errR}
	limit := a.spec.OutputLimit
	pump := func(stream string, r *os.File) {
		pumpEach(r, func(b []byte) {
			c.out.mu.Lock()
			id, dst := c.out.id, c.out.stdout
			if stream == "stderr" {
				dst = c.out.stderr
			}
			c.out.mu.Unlock()
			if dst == nil {
				return // between cells: a thread of the context's
			}
			a.event(id, p.pid, stream, b)
			dst.add(b, limit)
		})
	}
	p.pumps.Go(func() { pump("stdout", outR) })
	p.pumps.Go(func() { pump("stderr", errR) })
	return c, nil
}

// kill ends a context's process.
func (c *codeContext) kill() {
	killGroup(c.p.pid)
	c.req.Close()
	c.rep.Close()
}

// interrupt is a cell's timeout: SIGINT, as a terminal's ^C.
func (c *codeContext) interrupt() {
	pid := c.p.pid
	if c.lang.group {
		pid = -pid
	}
	_ = syscall.Kill(pid, syscall.SIGINT)
}

func (c *codeContext) dead() bool {
	select {
	case <-c.p.exited:
		return true
	default:
		return false
	}
}

// contextName is the context a request names: by default python's is
// "default" (as before there were others) and another language's its
// language's name, so that a cell of each needs no name.
func contextName(req *sessionapi.CodeRequest) string {
	switch {
	case req.Context != "":
		return req.Context
	case req.Language == "" || req.Language == "python":
		return "default"
	}
	return req.Language
}

// context returns the named context, starting it when it has none or
// its process died; reset says it was started for this call.
func (a *agent) context(id uint64, req *sessionapi.CodeRequest) (c *codeContext, reset bool, bad *envelope.Reply) {
	name := contextName(req)
	lang, known := languageOf(req.Language)
	if !known {
		return nil, false, fail(id, sessionapi.ErrInvalid, "language %q: a context runs one of %s", req.Language, languageNames())
	}
	a.mu.Lock()
	c, ok := a.ctxs[name]
	n := len(a.ctxs)
	a.mu.Unlock()
	if ok && c.lang != lang {
		return nil, false, fail(id, sessionapi.ErrInvalid, "context %q runs %s, not %s (reset it, or name another)", name, c.lang.name, lang.name)
	}
	if ok && !c.dead() {
		return c, false, nil
	}
	if !ok && n >= sessionapi.MaxContexts {
		return nil, false, errContexts(id)
	}
	cwd := a.dir
	if ok {
		cwd = c.cwd // a context that died starts again where it started
	}
	fresh, err := a.startContext(lang, cwd)
	if err != nil {
		return nil, false, fail(id, sessionapi.ErrFailed, "start context %q: %v", name, err)
	}
	if !a.install(name, c, fresh) {
		// Another call started this name meanwhile: its context is the one.
		fresh.kill()
		return a.context(id, req)
	}
	return fresh, true, nil
}

func (a *agent) code(id uint64, req *sessionapi.CodeRequest) *envelope.Reply {
	c, reset, bad := a.context(id, req)
	if bad != nil {
		return bad
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	start := time.Now()
	var stdout, stderr capped
	c.out.set(id, &stdout, &stderr)
	defer c.out.set(0, nil, nil)
	nonce := make([]byte, 12)
	_, _ = rand.Read(nonce)
	n := hex.EncodeToString(nonce)
	r := &sessionapi.CodeResult{Reset: reset, Language: c.lang.name}
	if _, err := c.req.Write(c.lang.request(n, req.Code)); err != nil {
		c.kill()
		return fail(id, sessionapi.ErrFailed, "the context died: %v", err)
	}
	c.cells.Add(1)
	type answer struct {
		Nonce string                `json:"nonce"`
		Text  *string               `json:"text"`
		Error *sessionapi.CodeError `json:"error"`
		Exit  *int                  `json:"exit"` // a shell's
	}
	got := make(chan *answer, 1)
	go func() {
		defer close(got)
		for {
			b, err := c.answers.ReadBytes('\n')
			if err != nil {
				return
			}
			var ans answer
			if json.Unmarshal(b, &ans) == nil && ans.Nonce == n {
				got <- &ans
				return
			}
		}
	}()
	var timeout <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout.D())
		defer t.Stop()
		timeout = t.C
	}
	var ans *answer
	select {
	case ans = <-got:
	case <-timeout:
		// Interrupted: the cell raises KeyboardInterrupt and the context
		// lives on, unless it does not stop within the grace.
		r.TimedOut = true
		c.interrupt()
		select {
		case ans = <-got:
		case <-time.After(interruptGrace):
			c.kill()
			<-got
		}
	}
	// The cell's output came before its answer, from the driver's process:
	// it is in the pipes already, and the pumps take it.
	c.drain(&stdout, &stderr)
	r.DurationMS = time.Since(start).Milliseconds()
	out, _ := stdout.snapshot()
	errOut, _ := stderr.snapshot()
	r.Stdout, r.StdoutEncoding = sessionapi.Text(out)
	r.Stderr, r.StderrEncoding = sessionapi.Text(errOut)
	r.Display, r.DisplayDropped = cellDisplays()
	if ans == nil {
		r.Error = &sessionapi.CodeError{Name: "ContextDied", Value: "the context's interpreter ended; the next call starts a fresh one"}
		return done(id, r)
	}
	// The value and the error are the cell's, as long as it likes: each
	// is kept to the output limit, as its streams are.
	limit := a.spec.OutputLimit
	if ans.Text != nil {
		r.Text = clipText(*ans.Text, limit)
	}
	if ans.Exit != nil {
		// A shell's cell fails as its last command did.
		r.ExitCode = ans.Exit
		if *ans.Exit != 0 {
			r.Error = &sessionapi.CodeError{Name: "ExitStatus", Value: strconv.Itoa(*ans.Exit)}
		}
	}
	if e := ans.Error; e != nil {
		r.Error = &sessionapi.CodeError{Name: clipText(e.Name, 256), Value: clipText(e.Value, limit), Traceback: clipText(e.Traceback, limit)}
	}
	return done(id, r)
}

// clipText keeps the first n bytes of s, cut at a character's start.
func clipText(s string, n int64) string {
	if int64(len(s)) <= n {
		return s
	}
	i := int(n)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// drain returns once the context's pumps have handed on what its pipes
// hold, or after 2 s.
func (c *codeContext) drain(bufs ...*capped) {
	// The pipes are empty once the pumps have read what the cell wrote
	// (a loaded machine, or gVisor, may not have run them yet), and the
	// pumps are done once the bytes they hold stop growing.
	// A pump that has read its bytes but not yet handed them on shows
	// neither, so the quiet must hold a few looks running.
	deadline := time.Now().Add(2 * time.Second)
	last, quiet := int64(-1), 0
	for time.Now().Before(deadline) && quiet < 3 {
		var n int64
		for _, b := range bufs {
			b.mu.Lock()
			n += b.n
			b.mu.Unlock()
		}
		if n == last && unread(c.outR) == 0 && unread(c.errR) == 0 {
			quiet++
		} else {
			quiet = 0
		}
		last = n
		time.Sleep(time.Millisecond)
	}
}

// unread is how many bytes a pipe holds that nobody has read yet; 0 when
// the kernel does not say.
func unread(f *os.File) int {
	if f == nil {
		return 0
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	var n int
	_ = rc.Control(func(fd uintptr) {
		_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
		if errno != 0 {
			n = 0
		}
	})
	return n
}

func (c *capped) snapshot() ([]byte, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.buf...), c.n
}

func (a *agent) reset(id uint64, req *sessionapi.CodeRequest) *envelope.Reply {
	name := contextName(req)
	a.mu.Lock()
	c, ok := a.ctxs[name]
	delete(a.ctxs, name)
	a.mu.Unlock()
	if ok {
		c.kill()
	}
	return done(id, struct{}{})
}
