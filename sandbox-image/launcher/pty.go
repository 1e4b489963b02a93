package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// A session's terminals (envelope.OpPTYOpen): a shell on a
// pseudo-terminal of the container's own devpts (Docker mounts a private
// instance at /dev/pts, nosuid and noexec; nothing of the spec's
// hardening is given up for it), its output sent as signed events and
// its input written by requests. The shell runs as the session's user,
// like any command of the session, in a session (setsid) of its own whose
// controlling terminal is the pty, so that ^C and a resize's SIGWINCH
// reach what runs in it.

type term struct {
	n      int
	master *os.File
	p      *proc

	mu      sync.Mutex
	cond    *sync.Cond
	sent    int64 // output bytes sent as events
	acked   int64 // of them, what the far end took
	started bool  // the first pty_input came: output may flow
	drained bool  // the shell ended ptyDrainGrace ago: what is unsent is cut
	closed  bool
}

// ptyDrainGrace is how long a terminal whose shell ended still waits for
// its reader to take what the shell left, a window at a time: a terminal
// is read across the network, and its reader's acknowledgement may come
// long after the shell's last write. lingerGrace, a command's, is for
// pipes read on this machine.
const ptyDrainGrace = 2 * time.Second

// openPTY opens a new pseudo-terminal: its master, and the path of its
// slave. The ioctls go through the poller's descriptor (SyscallConn), so
// that the master stays non-blocking and a read deadline or a close ends
// a read.
func openPTY() (*os.File, string, error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, "", err
	}
	var n uint32
	var unlock int32
	if err := ioctl(m, syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); err != nil {
		m.Close()
		return nil, "", fmt.Errorf("unlock the pty: %w", err)
	}
	if err := ioctl(m, syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); err != nil {
		m.Close()
		return nil, "", fmt.Errorf("the pty's number: %w", err)
	}
	return m, "/dev/pts/" + strconv.Itoa(int(n)), nil
}

func ioctl(f *os.File, req, arg uintptr) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	if err := sc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, req, arg)
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}

func setSize(m *os.File, cols, rows int) error {
	if cols <= 0 || rows <= 0 || cols > 10000 || rows > 10000 {
		return fmt.Errorf("size %dx%d: columns and rows must be 1 to 10000", cols, rows)
	}
	ws := struct{ rows, cols, x, y uint16 }{uint16(rows), uint16(cols), 0, 0}
	return ioctl(m, syscall.TIOCSWINSZ, uintptr(unsafe.Pointer(&ws)))
}

// shell is the image's interactive shell: bash where it has one. Under
// gVisor without readline (--noediting): readline's terminal setup makes
// gVisor's pty answer its first read with an end of file, and the shell
// would exit at once; the pty's own line editing (erase, kill, ^C) stays.
func (a *agent) shell() []string {
	if _, err := os.Stat("/bin/bash"); err == nil {
		if a.spec.Runtime == "runsc" {
			return []string{"/bin/bash", "--noediting", "-i"}
		}
		return []string{"/bin/bash", "-i"}
	}
	return []string{"/bin/sh", "-i"}
}

func (a *agent) ptyOpen(req *envelope.Request) *envelope.Reply {
	cols, rows := req.Cols, req.Rows
	if cols == 0 && rows == 0 {
		cols, rows = 80, 24
	}
	argv := req.Argv
	if len(argv) == 0 {
		argv = a.shell()
	}
	cwd, env := a.dir, a.env
	if req.Cwd != "" {
		var err error
		if cwd, err = a.resolve(req.Cwd); err != nil {
			return fail(req.ID, sessionapi.ErrInvalid, "%v", err)
		}
	}
	vars := map[string]string{"TERM": "xterm-256color"}
	for k, v := range req.Env {
		vars[k] = v
	}
	env = buildEnv(env, vars, a.dir)
	path, err := lookPath(argv[0], env)
	if err != nil {
		return fail(req.ID, sessionapi.ErrInvalid, "%s: command not found", argv[0])
	}

	a.mu.Lock()
	if len(a.ptys) >= envelope.MaxPTYs {
		a.mu.Unlock()
		return fail(req.ID, sessionapi.ErrLimit, "a session has at most %d terminals at once", envelope.MaxPTYs)
	}
	a.nextPTY++
	n := a.nextPTY
	a.ptys[n] = nil // held while it starts
	a.mu.Unlock()
	t, err := a.startTerm(n, path, argv, cwd, env, cols, rows)
	a.mu.Lock()
	if err != nil {
		delete(a.ptys, n)
	} else {
		a.ptys[n] = t
	}
	a.mu.Unlock()
	if err != nil {
		return fail(req.ID, sessionapi.ErrFailed, "%v", err)
	}
	go a.pumpTerm(req.ID, t)
	return &envelope.Reply{ID: req.ID, PTY: n, PID: t.p.pid}
}

func (a *agent) startTerm(n int, path string, argv []string, cwd string, env []string, cols, rows int) (*term, error) {
	m, slavePath, err := openPTY()
	if err != nil {
		return nil, fmt.Errorf("open a terminal: %w", err)
	}
	if err := setSize(m, cols, rows); err != nil {
		m.Close()
		return nil, err
	}
	slave, err := os.OpenFile(slavePath, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("open a terminal: %w", err)
	}
	defer slave.Close()
	fd := slave.Fd()
	a.mu.Lock()
	pid, err := 0, errSole
	if !a.sole {
		pid, err = syscall.ForkExec(path, argv, &syscall.ProcAttr{Dir: cwd, Env: env, Files: []uintptr{fd, fd, fd},
			Sys: &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}})
	}
	var p *proc
	if err == nil {
		p = &proc{pid: pid, argv: argv, started: time.Now(), exited: make(chan struct{})}
		a.procs[pid] = p
	}
	a.mu.Unlock()
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("%s: %w", argv[0], err)
	}
	t := &term{n: n, master: m, p: p}
	t.cond = sync.NewCond(&t.mu)
	return t, nil
}

// pumpTerm sends the terminal's output as events of request id, at most
// PTYWindow bytes ahead of what was acknowledged, until its shell has
// ended (and what it left is read) or it is closed; then its end.
func (a *agent) pumpTerm(id uint64, t *term) {
	go func() {
		<-t.p.exited
		// What the shell left, and what its descendants still write,
		// within the grace; past it the terminal is cut, as a command's
		// pipes are.
		_ = t.master.SetReadDeadline(time.Now().Add(ptyDrainGrace))
		t.mu.Lock()
		t.cond.Broadcast()
		t.mu.Unlock()
		time.Sleep(ptyDrainGrace)
		t.mu.Lock()
		t.drained = true
		t.cond.Broadcast()
		t.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		t.mu.Lock()
		for !t.closed && (!t.started || t.sent-t.acked >= envelope.PTYWindow) {
			select {
			case <-t.p.exited:
				if t.started && t.drained {
					t.closed = true // ended, and nobody took the rest in time
				}
			default:
			}
			if t.closed {
				break
			}
			t.cond.Wait()
		}
		room := min(int64(len(buf)), envelope.PTYWindow-(t.sent-t.acked))
		closed := t.closed
		t.mu.Unlock()
		if closed {
			break
		}
		n, err := t.master.Read(buf[:room])
		if n > 0 {
			t.mu.Lock()
			t.sent += int64(n)
			t.mu.Unlock()
			_ = a.fr.frame(envelope.FrameEvent, a.seal.SignEvent(&envelope.Event{ID: id, PID: t.p.pid, Stream: envelope.StreamPTY, PTY: t.n, Data: buf[:n]}))
		}
		if err != nil {
			break // EIO once no process holds the terminal, or the deadline
		}
	}
	// Hang up: what still runs on the terminal ends with it.
	_ = syscall.Kill(-t.p.pid, syscall.SIGHUP)
	select {
	case <-t.p.exited:
	case <-time.After(time.Second):
		_ = syscall.Kill(-t.p.pid, syscall.SIGKILL)
		<-t.p.exited
	}
	t.master.Close()
	a.mu.Lock()
	delete(a.ptys, t.n)
	a.mu.Unlock()
	exit, sig := exitOf(t.p.st.status)
	_ = a.fr.frame(envelope.FrameEvent, a.seal.SignEvent(&envelope.Event{ID: id, PID: t.p.pid, Stream: envelope.StreamPTYExit, PTY: t.n, Exit: &exit, Signal: sig}))
}

func (a *agent) term(id uint64, n int) (*term, *envelope.Reply) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.ptys[n]
	if t == nil {
		return nil, fail(id, sessionapi.ErrNotFound, "no terminal %d", n)
	}
	return t, nil
}

func (a *agent) pty(req *envelope.Request) *envelope.Reply {
	if req.Op == envelope.OpPTYOpen {
		return a.ptyOpen(req)
	}
	t, bad := a.term(req.ID, req.PTY)
	if bad != nil {
		return bad
	}
	switch req.Op {
	case envelope.OpPTYInput:
		t.mu.Lock()
		t.started = true
		if req.Acked > t.acked && req.Acked <= t.sent {
			t.acked = req.Acked
		}
		t.cond.Broadcast()
		t.mu.Unlock()
		if len(req.Data) > 0 {
			_ = t.master.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := t.master.Write(req.Data); err != nil && !errors.Is(err, os.ErrClosed) {
				return fail(req.ID, sessionapi.ErrFailed, "write to terminal %d: %v", t.n, err)
			}
		}
	case envelope.OpPTYResize:
		if err := setSize(t.master, req.Cols, req.Rows); err != nil {
			return fail(req.ID, sessionapi.ErrInvalid, "%v", err)
		}
	case envelope.OpPTYClose:
		t.mu.Lock()
		t.closed = true
		t.cond.Broadcast()
		t.mu.Unlock()
		_ = t.master.SetReadDeadline(time.Now())
	}
	return &envelope.Reply{ID: req.ID, PTY: t.n}
}
