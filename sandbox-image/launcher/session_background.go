package main

import (
	"errors"
	"sync"
	"syscall"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

func (a *agent) startBackground(id uint64, req *sessionapi.ExecRequest, argv []string, cwd string, env []string) *envelope.Reply {
	a.mu.Lock()
	n := len(a.bg)
	a.mu.Unlock()
	if n >= a.spec.MaxProcesses {
		return fail(id, sessionapi.ErrLimit, "the session keeps at most %d background processes: wait for or signal one", a.spec.MaxProcesses)
	}
	p, stdin, outR, errR, err := a.spawn(argv, cwd, env, true)
	if err != nil {
		return fail(id, sessionapi.ErrFailed, "%v", err)
	}
	p.stdin, p.out, p.inTurn = stdin, &ring{max: a.spec.OutputLimit}, make(chan struct{}, 1)
	if len(req.Stdin) > 0 {
		// Written while the process runs, not before the start is
		// answered: one that does not read its stdin (yet) would hold
		// the call, and its pid, for ever.
		p.inTurn <- struct{}{}
		go func() {
			defer func() { <-p.inTurn }()
			_, _ = stdin.Write([]byte(req.Stdin))
		}()
	}
	a.mu.Lock()
	a.bg[p.pid] = p
	a.mu.Unlock()
	p.pumps.Go(func() { a.pumpTo(id, p.pid, "stdout", outR, p.out.add) })
	p.pumps.Go(func() { a.pumpTo(id, p.pid, "stderr", errR, p.out.add) })
	return done(id, &sessionapi.ExecResult{PID: p.pid})
}

// ring keeps the last max bytes of a process's output and the offset
// the output has reached.
type ring struct {
	mu   sync.Mutex
	max  int64
	buf  []byte
	next int64 // offset of the byte after buf's last
}

func (r *ring) add(p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, p...)
	r.next += int64(len(p))
	if over := int64(len(r.buf)) - r.max; over > 0 {
		r.buf = append(r.buf[:0], r.buf[over:]...)
	}
}

// since returns the output from offset from on, what was dropped before
// it, and the offset to ask from next.
func (r *ring) since(from int64) (out []byte, dropped, next int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := r.next - int64(len(r.buf))
	if from < first {
		dropped, from = first-from, first
	}
	if from > r.next {
		from = r.next
	}
	return append([]byte(nil), r.buf[from-first:]...), dropped, r.next
}

func (a *agent) background(id uint64, pid int) (*proc, *envelope.Reply) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.bg[pid]
	if !ok {
		return nil, fail(id, sessionapi.ErrNotFound, "no background process %d", pid)
	}
	return p, nil
}

func (p *proc) report() sessionapi.Process {
	e := sessionapi.Process{PID: p.pid, Cmd: p.argv, Started: p.started.UnixMilli()}
	_, _, e.OutputBytes = p.out.since(1 << 62)
	select {
	case <-p.exited:
		exit, sig := exitOf(p.st.status)
		e.ExitCode, e.Signal = &exit, sig
	default:
		e.Running = true
	}
	return e
}

func (a *agent) processes(id uint64) *envelope.Reply {
	a.mu.Lock()
	ps := make([]*proc, 0, len(a.bg))
	for _, p := range a.bg {
		ps = append(ps, p)
	}
	a.mu.Unlock()
	out := []sessionapi.Process{}
	for _, p := range ps {
		out = append(out, p.report())
	}
	return done(id, out)
}

// process reads a background process's output: at once, or once it has
// ended or req.Wait has passed (the session's host bounds it).
func (a *agent) process(id uint64, req *sessionapi.ProcessRequest) *envelope.Reply {
	p, bad := a.background(id, req.PID)
	if bad != nil {
		return bad
	}
	if req.Wait > 0 {
		return a.wait(id, p, req)
	}
	out, dropped, next := p.out.since(req.Since)
	r := &sessionapi.ProcessOutput{PID: p.pid, Dropped: dropped, Next: next}
	select {
	case <-p.exited:
	default:
		r.Running = true
	}
	return done(id, withOutput(r, out, req.Since))
}

// wait waits up to the request's Wait for a background process to end;
// one that ended is collected (no longer listed).
func (a *agent) wait(id uint64, p *proc, req *sessionapi.ProcessRequest) *envelope.Reply {
	t := time.NewTimer(req.Wait.D())
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		return done(id, &sessionapi.ProcessOutput{PID: p.pid, Running: true, Next: req.Since})
	}
	// What its pipes still hold, within the grace: a child of its that
	// holds them (a server a shell started with &) may write on for as
	// long as it lives, and its output is still kept meanwhile.
	pumped := make(chan struct{})
	go func() {
		p.pumps.Wait()
		close(pumped)
	}()
	select {
	case <-pumped:
	case <-time.After(lingerGrace):
	}
	exit, sig := exitOf(p.st.status)
	out, dropped, next := p.out.since(req.Since)
	a.mu.Lock()
	delete(a.bg, p.pid)
	a.mu.Unlock()
	if p.stdin != nil {
		p.stdin.Close()
	}
	r := &sessionapi.ProcessOutput{PID: p.pid, ExitCode: &exit, Signal: sig, Dropped: dropped, Next: next}
	return done(id, withOutput(r, out, req.Since))
}

func (a *agent) signal(id uint64, req *sessionapi.SignalRequest) *envelope.Reply {
	p, bad := a.background(id, req.PID)
	if bad != nil {
		return bad
	}
	sig := syscall.Signal(req.Signal)
	if req.Signal == 0 {
		sig = syscall.SIGTERM
	}
	if req.Signal < 0 || req.Signal > 64 {
		return fail(id, sessionapi.ErrInvalid, "signal %d: not a signal", req.Signal)
	}
	select {
	case <-p.exited:
		return fail(id, sessionapi.ErrNotFound, "process %d has exited", p.pid)
	default:
	}
	err := syscall.Kill(-p.pid, sig)
	if pg, perr := syscall.Getpgid(p.pid); perr == nil && pg != p.pid {
		// It left its group (setpgid): itself too.
		if kerr := syscall.Kill(p.pid, sig); errors.Is(err, syscall.ESRCH) {
			err = kerr
		}
	}
	if err != nil {
		return fail(id, sessionapi.ErrFailed, "signal %d: %v", p.pid, err)
	}
	return done(id, struct{}{})
}

func (a *agent) stdin(id uint64, req *sessionapi.StdinRequest) *envelope.Reply {
	p, bad := a.background(id, req.PID)
	if bad != nil {
		return bad
	}
	select {
	case p.inTurn <- struct{}{}:
		defer func() { <-p.inTurn }()
	case <-time.After(10 * time.Second):
		return fail(id, sessionapi.ErrFailed, "process %d has not taken the stdin it was given before", p.pid)
	}
	a.mu.Lock()
	in := p.stdin
	if req.EOF {
		p.stdin = nil
	}
	a.mu.Unlock()
	if in == nil {
		return fail(id, sessionapi.ErrInvalid, "process %d's stdin is closed", p.pid)
	}
	if len(req.Data) > 0 {
		_ = in.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := in.Write(req.Data); err != nil {
			return fail(id, sessionapi.ErrFailed, "write to %d: %v", p.pid, err)
		}
	}
	if req.EOF {
		in.Close()
	}
	return done(id, struct{}{})
}

// withOutput sets the output read from since, at most
// sessionapi.MaxReplyOutput of it: the rest is read from Next.
func withOutput(r *sessionapi.ProcessOutput, out []byte, since int64) *sessionapi.ProcessOutput {
	if len(out) > sessionapi.MaxReplyOutput {
		out = out[:sessionapi.MaxReplyOutput]
		r.Next = since + r.Dropped + int64(len(out))
	}
	r.Output, r.Encoding = sessionapi.Text(out)
	return r
}
