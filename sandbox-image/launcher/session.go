package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// A session's agent (envelope/session.go): the launcher, once the
// envelope asks for a session, serves requests from the container's stdin
// until it is closed, its deadman runs out or its lifetime ends. It stays
// what the launcher is for a job: PID 1, not dumpable, the only writer of
// the container's stdout, and every process it starts holds pipes of its
// own, never the container's streams; so what it reports of a command
// (its exit status, its output) is its word, signed with the envelope's
// key. The output is what came down the command's pipes, which another
// process of the session (same uid) may open through /proc and write
// into, unless the command runs exclusive (session_exclusive.go).

// maxInFlight bounds the requests the agent serves at once; one past it
// is answered with sessionapi.ErrLimit at once.
const maxInFlight = 64

// maxReadChunk bounds what one read returns; the executor reads a larger
// file in several.
const maxReadChunk = 4 << 20

// maxEntries bounds a directory listing.
const maxEntries = 10000

type agent struct {
	seal envelope.Seal
	fr   *framer
	spec envelope.Session
	dir  string
	env  []string
	born time.Time

	inflight chan struct{}
	lastSeen chan struct{} // a request came: the deadman starts again
	end      chan string   // why the session ends

	archiving sync.Mutex // one checkpoint at a time (checkpoint.go)

	mu    sync.Mutex
	sole  bool          // an exclusive command runs: nothing else may start (session_exclusive.go)
	procs map[int]*proc // every child the agent started and has not reaped
	bg    map[int]*proc // the background processes, listed and collectable
	ctxs  map[string]*codeContext
	ptys  map[int]*term // the terminals (pty.go)

	nextPTY int
}

// proc is a process the agent started.
type proc struct {
	pid     int
	argv    []string
	started time.Time
	exited  chan struct{} // closed once reaped; st is then set
	st      waited
	stdin   *os.File      // a background process's, until closed
	inTurn  chan struct{} // held by the write to stdin under way, so that writes keep their order
	out     *ring         // a background process's output
	pumps   sync.WaitGroup
}

func serveSession(h *envelope.Header, fr *framer, dir string, sigs, chld <-chan os.Signal) int {
	a := &agent{
		seal: h.Seal(), fr: fr, spec: *h.Session, dir: dir,
		env:  buildEnv(os.Environ(), h.Env, dir),
		born: time.Now(), inflight: make(chan struct{}, maxInFlight),
		lastSeen: make(chan struct{}, 1), end: make(chan string, 1),
		procs: map[int]*proc{}, bg: map[int]*proc{}, ctxs: map[string]*codeContext{}, ptys: map[int]*term{},
	}
	in := os.Stdin
	if err := syscall.SetNonblock(0, true); err == nil {
		in = os.NewFile(0, "stdin") // the poller's, not a thread's
	}
	go a.read(in)
	go a.reap(chld)
	why := a.watch(sigs)
	_ = syscall.Kill(-1, syscall.SIGKILL) // every process of the sandbox but PID 1
	_ = fr.frame(envelope.FrameTrailer, a.seal.Sign(envelope.Trailer{Error: why}))
	return 0
}

// watch returns why the session ends: a close, a stop signal, the deadman
// or the lifetime.
func (a *agent) watch(sigs <-chan os.Signal) string {
	lifetime := time.NewTimer(time.Duration(a.spec.LifetimeMS) * time.Millisecond)
	deadman := time.NewTimer(time.Duration(a.spec.DeadmanMS) * time.Millisecond)
	for {
		select {
		case why := <-a.end:
			return why
		case s := <-sigs:
			if s == syscall.SIGTERM || s == syscall.SIGINT || s == syscall.SIGHUP || s == syscall.SIGQUIT {
				return "stopped"
			}
		case <-a.lastSeen:
			deadman.Reset(time.Duration(a.spec.DeadmanMS) * time.Millisecond)
		case <-deadman.C:
			return "idle"
		case <-lifetime.C:
			return "lifetime"
		}
	}
}

func (a *agent) stop(why string) {
	select {
	case a.end <- why:
	default:
	}
}

// read takes requests off stdin and serves each in a goroutine of its own.
func (a *agent) read(in *os.File) {
	asm := envelope.NewAssembler(maxInFlight)
	var frames envelope.Deframer
	frames.Handle = func(kind byte, payload []byte) {
		if kind != envelope.FrameRequestPart && kind != envelope.FrameRequest {
			a.stop("broken")
			return
		}
		id, msg, done, err := asm.Add(payload, kind == envelope.FrameRequest)
		if err != nil {
			a.reply(&envelope.Reply{ID: id, Error: sessionapi.Errorf(sessionapi.ErrLimit, "%s", err.Error())})
			return
		}
		if !done {
			return
		}
		select {
		case a.lastSeen <- struct{}{}:
		default:
		}
		var req envelope.Request
		if err := json.Unmarshal(msg, &req); err != nil {
			a.reply(&envelope.Reply{ID: id, Error: sessionapi.Errorf(sessionapi.ErrInvalid, "%s", "not a request: "+err.Error())})
			return
		}
		req.ID = id
		select {
		case a.inflight <- struct{}{}:
		default:
			a.reply(&envelope.Reply{ID: id, Error: sessionapi.Errorf(sessionapi.ErrLimit, "%s", fmt.Sprintf("over %d requests at once", maxInFlight))})
			return
		}
		go func() {
			defer func() { <-a.inflight }()
			a.reply(a.serve(&req))
		}()
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			_, _ = frames.Write(buf[:n])
			if frames.Err() != nil {
				a.stop("broken")
				return
			}
		}
		if err != nil {
			a.stop("closed") // the executor's end of stdin is gone
			return
		}
	}
}

func (a *agent) reply(r *envelope.Reply) {
	msg := a.seal.SignReply(r)
	if len(msg) > envelope.MaxMessageBytes {
		// The executor takes no message over the bound (its check would
		// end the session): the call fails instead, saying why.
		msg = a.seal.SignReply(fail(r.ID, sessionapi.ErrLimit, "the reply is %d bytes, over the %d a message may have", len(msg), envelope.MaxMessageBytes))
	}
	b := envelope.AppendMessage(nil, envelope.FrameReplyPart, envelope.FrameReply, r.ID, msg)
	a.fr.raw(b)
}

func (a *agent) event(id uint64, pid int, stream string, p []byte) {
	_ = a.fr.frame(envelope.FrameEvent, a.seal.SignEvent(&envelope.Event{ID: id, PID: pid, Stream: stream, Data: p}))
}

func (a *agent) serve(req *envelope.Request) *envelope.Reply {
	switch req.Op {
	case envelope.OpPing:
		return &envelope.Reply{ID: req.ID}
	case envelope.OpClose:
		a.stop("closed")
		return &envelope.Reply{ID: req.ID}
	case sessionapi.OpExec:
		return with(req, a.exec)
	case sessionapi.OpProcesses:
		return a.processes(req.ID)
	case sessionapi.OpProcess:
		return with(req, a.process)
	case sessionapi.OpSignal:
		return with(req, a.signal)
	case sessionapi.OpStdin:
		return with(req, a.stdin)
	case sessionapi.OpCode:
		return with(req, a.code)
	case sessionapi.OpReset:
		return with(req, a.reset)
	case sessionapi.OpContexts:
		return a.contexts(req.ID)
	case sessionapi.OpContext:
		return with(req, a.newContext)
	case sessionapi.OpEndContext:
		return with(req, a.endContext)
	case sessionapi.OpRead, sessionapi.OpWrite, sessionapi.OpList, sessionapi.OpStat, sessionapi.OpRemove, sessionapi.OpMkdir, sessionapi.OpRename:
		return with(req, func(id uint64, body *sessionapi.FileRequest) *envelope.Reply { return a.file(id, req.Op, body) })
	case envelope.OpArchive:
		return a.checkpoint(req)
	case envelope.OpPTYOpen, envelope.OpPTYInput, envelope.OpPTYResize, envelope.OpPTYClose:
		return a.pty(req)
	case envelope.OpConnOpen, envelope.OpConnInput, envelope.OpConnClose:
		return a.conn(req)
	}
	return fail(req.ID, sessionapi.ErrInvalid, "unknown op %q", req.Op)
}

// reap collects every child that exits, as PID 1 must, and tells the
// agent's own. The lock is taken after the wait: a spawn registers its
// child under it, so a child that exits at once is still found.
func (a *agent) reap(chld <-chan os.Signal) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-chld:
		case <-tick.C:
		}
		a.collect()
	}
}

// collect reaps every child that has exited, without waiting.
func (a *agent) collect() {
	for {
		var w waited
		pid, err := syscall.Wait4(-1, &w.status, syscall.WNOHANG, &w.usage)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		a.mu.Lock()
		if p, ok := a.procs[pid]; ok {
			delete(a.procs, pid)
			p.st = w
			close(p.exited)
		}
		a.mu.Unlock()
	}
}

// spawn starts argv in a process group of its own, with pipes of the
// agent's for its streams; stdin is a pipe too when withStdin, else
// /dev/null. extra are more files for the child (fds 3, 4...). It fails
// while an exclusive command runs.
func (a *agent) spawn(argv []string, cwd string, env []string, withStdin bool, extra ...*os.File) (p *proc, stdin, outR, errR *os.File, err error) {
	return a.start(false, argv, cwd, env, withStdin, extra...)
}

// start is spawn; sole is the exclusive command's own start, the one
// allowed while a.sole is set.
func (a *agent) start(sole bool, argv []string, cwd string, env []string, withStdin bool, extra ...*os.File) (p *proc, stdin, outR, errR *os.File, err error) {
	path, err := lookPath(argv[0], env)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("%s: command not found", argv[0])
	}
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	var inR *os.File
	if withStdin {
		if inR, stdin, err = os.Pipe(); err != nil {
			return nil, nil, nil, nil, err
		}
		files = append(files, inR)
	} else if inR, err = os.Open(os.DevNull); err != nil {
		return nil, nil, nil, nil, err
	} else {
		files = append(files, inR)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	files = append(files, outW)
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll()
		outR.Close()
		return nil, nil, nil, nil, err
	}
	files = append(files, errW)
	fds := []uintptr{inR.Fd(), outW.Fd(), errW.Fd()}
	for _, f := range extra {
		fds = append(fds, f.Fd())
	}
	a.mu.Lock()
	pid, err := 0, errSole
	if !a.sole || sole {
		pid, err = syscall.ForkExec(path, argv, &syscall.ProcAttr{Dir: cwd, Env: env, Files: fds, Sys: &syscall.SysProcAttr{Setpgid: true}})
	}
	if err == nil {
		p = &proc{pid: pid, argv: argv, started: time.Now(), exited: make(chan struct{})}
		a.procs[pid] = p
	}
	a.mu.Unlock()
	closeAll()
	if err != nil {
		if stdin != nil {
			stdin.Close()
		}
		outR.Close()
		errR.Close()
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, nil, nil, fmt.Errorf("%s: command not found", argv[0])
		}
		if err == errSole {
			return nil, nil, nil, nil, err
		}
		return nil, nil, nil, nil, fmt.Errorf("%s: %w", argv[0], err)
	}
	return p, stdin, outR, errR, nil
}

// command is the argv, directory and environment an exec asks for.
func (a *agent) command(req *sessionapi.ExecRequest) (argv []string, cwd string, env []string, err error) {
	switch {
	case len(req.Cmd) > 0 && req.Shell != "":
		return nil, "", nil, errors.New("give cmd or shell, not both")
	case len(req.Cmd) > 0:
		argv = req.Cmd
	case req.Shell != "":
		argv = []string{"/bin/sh", "-c", req.Shell}
	default:
		return nil, "", nil, errors.New("cmd or shell: missing")
	}
	cwd = a.dir
	if req.Cwd != "" {
		if cwd, err = a.resolve(req.Cwd); err != nil {
			return nil, "", nil, err
		}
	}
	env = a.env
	if len(req.Env) > 0 {
		env = buildEnv(a.env, req.Env, a.dir)
	}
	return argv, cwd, env, nil
}

// exec runs a command: in the background when asked (its PID is the
// answer), else to its end or its Timeout (none when 0: the session's
// host sets it within the session's limit).
func (a *agent) exec(id uint64, req *sessionapi.ExecRequest) *envelope.Reply {
	argv, cwd, env, err := a.command(req)
	if err != nil {
		return fail(id, sessionapi.ErrInvalid, "%v", err)
	}
	if req.Exclusive {
		return a.execExclusive(id, req, argv, cwd, env)
	}
	if req.Background {
		return a.startBackground(id, req, argv, cwd, env)
	}
	p, stdin, outR, errR, err := a.spawn(argv, cwd, env, len(req.Stdin) > 0)
	if err != nil {
		return fail(id, sessionapi.ErrFailed, "%v", err)
	}
	return done(id, a.foreground(id, req, p, stdin, outR, errR))
}

// foreground feeds a started command its stdin, and returns its end and
// output once it has exited (or been killed at its timeout).
func (a *agent) foreground(id uint64, req *sessionapi.ExecRequest, p *proc, stdin, outR, errR *os.File) *sessionapi.ExecResult {
	if stdin != nil {
		go func() {
			_, _ = stdin.Write([]byte(req.Stdin))
			stdin.Close()
		}()
	}
	limit := a.spec.OutputLimit
	var stdout, stderr capped
	p.pumps.Go(func() { a.pumpTo(id, p.pid, "stdout", outR, func(b []byte) { stdout.add(b, limit) }) })
	p.pumps.Go(func() { a.pumpTo(id, p.pid, "stderr", errR, func(b []byte) { stderr.add(b, limit) }) })
	var timeout <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout.D())
		defer t.Stop()
		timeout = t.C
	}
	r := &sessionapi.ExecResult{}
	select {
	case <-p.exited:
	case <-timeout:
		r.TimedOut = true
		killGroup(p.pid)
		<-p.exited
	}
	// What the pipes still hold, or what a descendant that outlived the
	// command writes within the grace; past it the pipes are cut.
	deadline := time.Now().Add(lingerGrace)
	_ = outR.SetReadDeadline(deadline)
	_ = errR.SetReadDeadline(deadline)
	p.pumps.Wait()
	exit, sig := exitOf(p.st.status)
	r.ExitCode, r.Signal = &exit, sig
	r.DurationMS = time.Since(p.started).Milliseconds()
	r.Stdout, r.StdoutEncoding = sessionapi.Text(stdout.buf)
	r.Stderr, r.StderrEncoding = sessionapi.Text(stderr.buf)
	r.StdoutTruncated, r.StderrTruncated = stdout.n > int64(len(stdout.buf)), stderr.n > int64(len(stderr.buf))
	return r
}

// killGroup kills the process group pid leads, and pid itself: a
// process may move into another group of the session (setpgid), where
// the group's kill no longer reaches it.
func killGroup(pid int) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// capped keeps the first limit bytes of a stream and counts them all.
type capped struct {
	mu  sync.Mutex
	buf []byte
	n   int64
}

func (c *capped) add(p []byte, limit int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += int64(len(p))
	if room := limit - int64(len(c.buf)); room > 0 {
		c.buf = append(c.buf, p[:min(room, int64(len(p)))]...)
	}
}

// pumpTo reads r to its end, sending each piece as a live event of
// request id and to keep.
func (a *agent) pumpTo(id uint64, pid int, stream string, r *os.File, keep func([]byte)) {
	pumpEach(r, func(b []byte) {
		a.event(id, pid, stream, b)
		keep(b)
	})
}

// pumpEach reads r to its end, handing each piece to fn.
func pumpEach(r *os.File, fn func([]byte)) {
	defer r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			fn(buf[:n])
		}
		if err != nil {
			return
		}
	}
}
