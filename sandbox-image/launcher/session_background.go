package main

import (
	"errors"
	"sync"
	"syscall"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

func (a *agent) startBackground(req *envelope.Request, argv []string, cwd string, env []string) *envelope.Reply {
	a.mu.Lock()
	n := len(a.bg)
	a.mu.Unlock()
	if n >= a.spec.MaxProcesses {
		return fail(req.ID, sessionapi.ErrLimit, "the session keeps at most %d background processes: wait for or signal one", a.spec.MaxProcesses)
	}
	p, stdin, outR, errR, err := a.spawn(argv, cwd, env, true)
	if err != nil {
		return fail(req.ID, sessionapi.ErrFailed, "%v", err)
	}
	p.stdin, p.out, p.inTurn = stdin, &ring{max: a.spec.OutputLimit}, make(chan struct{}, 1)
	if len(req.Stdin) > 0 {
		// Written while the process runs, not before the start is
		// answered: one that does not read its stdin (yet) would hold
		// the call, and its pid, for ever.
		p.inTurn <- struct{}{}
		go func() {
			defer func() { <-p.inTurn }()
			_, _ = stdin.Write(req.Stdin)
		}()
	}
	a.mu.Lock()
	a.bg[p.pid] = p
	a.mu.Unlock()
	p.pumps.Go(func() { a.pumpTo(req.ID, p.pid, "stdout", outR, p.out.add) })
	p.pumps.Go(func() { a.pumpTo(req.ID, p.pid, "stderr", errR, p.out.add) })
	return &envelope.Reply{ID: req.ID, PID: p.pid}
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

func (a *agent) processes(req *envelope.Request) *envelope.Reply {
	a.mu.Lock()
	ps := make([]*proc, 0, len(a.bg))
	for _, p := range a.bg {
		ps = append(ps, p)
	}
	a.mu.Unlock()
	r := &envelope.Reply{ID: req.ID, Processes: []sessionapi.Process{}}
	for _, p := range ps {
		r.Processes = append(r.Processes, p.report())
	}
	return r
}

// wait waits up to the request's timeout for a background process to
// end; one that ended is collected (no longer listed).
func (a *agent) wait(req *envelope.Request) *envelope.Reply {
	p, bad := a.background(req.ID, req.PID)
	if bad != nil {
		return bad
	}
	var timeout <-chan time.Time
	if req.TimeoutMS > 0 {
		t := time.NewTimer(time.Duration(req.TimeoutMS) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-p.exited:
	case <-timeout:
		return &envelope.Reply{ID: req.ID, PID: p.pid, Running: true, TimedOut: true}
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
	return &envelope.Reply{ID: req.ID, PID: p.pid, Exit: &exit, Signal: sig, Output: out, Dropped: dropped, Next: next,
		DurationMS: time.Since(p.started).Milliseconds()}
}

func (a *agent) output(req *envelope.Request) *envelope.Reply {
	p, bad := a.background(req.ID, req.PID)
	if bad != nil {
		return bad
	}
	out, dropped, next := p.out.since(req.Since)
	r := &envelope.Reply{ID: req.ID, PID: p.pid, Output: out, Dropped: dropped, Next: next}
	select {
	case <-p.exited:
	default:
		r.Running = true
	}
	return r
}

func (a *agent) signal(req *envelope.Request) *envelope.Reply {
	p, bad := a.background(req.ID, req.PID)
	if bad != nil {
		return bad
	}
	sig := syscall.Signal(req.Signal)
	if req.Signal == 0 {
		sig = syscall.SIGTERM
	}
	if req.Signal < 0 || req.Signal > 64 {
		return fail(req.ID, sessionapi.ErrInvalid, "signal %d: not a signal", req.Signal)
	}
	select {
	case <-p.exited:
		return fail(req.ID, sessionapi.ErrNotFound, "process %d has exited", p.pid)
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
		return fail(req.ID, sessionapi.ErrFailed, "signal %d: %v", p.pid, err)
	}
	return &envelope.Reply{ID: req.ID, PID: p.pid}
}

func (a *agent) stdin(req *envelope.Request) *envelope.Reply {
	p, bad := a.background(req.ID, req.PID)
	if bad != nil {
		return bad
	}
	select {
	case p.inTurn <- struct{}{}:
		defer func() { <-p.inTurn }()
	case <-time.After(10 * time.Second):
		return fail(req.ID, sessionapi.ErrFailed, "process %d has not taken the stdin it was given before", p.pid)
	}
	a.mu.Lock()
	in := p.stdin
	if req.EOF {
		p.stdin = nil
	}
	a.mu.Unlock()
	if in == nil {
		return fail(req.ID, sessionapi.ErrInvalid, "process %d's stdin is closed", p.pid)
	}
	if len(req.Data) > 0 {
		_ = in.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := in.Write(req.Data); err != nil {
			return fail(req.ID, sessionapi.ErrFailed, "write to %d: %v", p.pid, err)
		}
	}
	if req.EOF {
		in.Close()
	}
	return &envelope.Reply{ID: req.ID, PID: p.pid}
}
