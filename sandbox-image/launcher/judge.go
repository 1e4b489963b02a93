package main

// The compile step and the test cases of a job (see internal/envelope's
// tests.go). Both run as the job's command does: from the working
// directory, with the job's environment, as children the launcher reaps.
// A case's verdict is the launcher's: the case's process holds only its own
// pipes, so what it prints is compared, never believed.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/judge"
)

// killReason says why the launcher killed a child.
type killReason int

const (
	notKilled killReason = iota
	killedTimeout
	killedOutput
)

// await reaps until pid has exited, passing on the forwarded signals
// (to its group when group is set). At deadline, or when over fires, it
// kills the child's group and says why. A slow tick reaps too, should a
// SIGCHLD ever be missed.
func await(pid int, group bool, sigs, chld <-chan os.Signal, deadline <-chan time.Time, over <-chan struct{}) (waited, killReason) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	target := pid
	if group {
		target = -pid
	}
	why := notKilled
	kill := func(r killReason) {
		if why == notKilled {
			why = r
		}
		_ = syscall.Kill(target, syscall.SIGKILL)
	}
	var st waited
	for done := false; !done; {
		select {
		case <-chld:
			st, done = reap(pid, st)
		case <-tick.C:
			st, done = reap(pid, st)
		case s := <-sigs:
			if forwarded[s] {
				_ = syscall.Kill(target, s.(syscall.Signal))
			}
		case <-deadline:
			deadline = nil
			kill(killedTimeout)
		case <-over:
			over = nil
			kill(killedOutput)
		}
	}
	return st, why
}

// exitOf is the shell's view of a wait status: the exit status, or 128+N
// for signal N.
func exitOf(ws syscall.WaitStatus) (exit, signal int) {
	if ws.Signaled() {
		return 128 + int(ws.Signal()), int(ws.Signal())
	}
	return ws.ExitStatus(), 0
}

// startErr turns a failed ForkExec into the shell's status.
func startErr(err error) int {
	if errors.Is(err, fs.ErrNotExist) {
		return exitNotFound
	}
	return exitNoExec
}

// boundedBuf keeps the first max bytes written, counts them all and fires
// over, once, past limit.
type boundedBuf struct {
	mu    sync.Mutex
	buf   []byte
	keep  int64
	n     int64
	limit int64
	over  chan struct{}
	fired bool
}

func newBoundedBuf(keep, limit int64, over chan struct{}) *boundedBuf {
	return &boundedBuf{keep: keep, limit: limit, over: over}
}

func (b *boundedBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n += int64(len(p))
	if room := b.keep - int64(len(b.buf)); room > 0 {
		b.buf = append(b.buf, p[:min(room, int64(len(p)))]...)
	}
	if b.n > b.limit && !b.fired && b.over != nil {
		b.fired = true
		select {
		case b.over <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// compile runs the header's compile step. It frames the compiler's output
// (stdout and stderr as one) up to limit and fills the trailer's compile
// fields; ok reports that it exited 0.
func compile(fr *framer, px procEnv, argv []string, limit int64, t *envelope.Trailer) (ok bool) {
	start := time.Now()
	code := 0
	defer func() {
		t.CompileExit = &code
		t.CompileMS = time.Since(start).Milliseconds()
	}()
	path, err := lookPath(argv[0], px.env)
	if err != nil {
		code = exitNotFound
		t.Error = fmt.Sprintf("compile: %s: command not found", argv[0])
		return false
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		code = exitLauncher
		t.Error = fmt.Sprintf("compile: %v", err)
		return false
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		code = exitLauncher
		t.Error = fmt.Sprintf("compile: pipe: %v", err)
		return false
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Dir: px.dir, Env: px.env,
		Files: []uintptr{null.Fd(), w.Fd(), w.Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	w.Close()
	if err != nil {
		r.Close()
		code = startErr(err)
		t.Error = fmt.Sprintf("compile: %s: %v", argv[0], err)
		return false
	}
	out := &compileOut{fr: fr, limit: limit}
	var pumps sync.WaitGroup
	pumps.Go(func() { pump(out, r) })
	st, _ := await(pid, true, px.sigs, px.chld, nil, nil)
	_ = syscall.Kill(-pid, syscall.SIGKILL) // what the compiler left behind
	_ = r.SetReadDeadline(time.Now().Add(lingerGrace))
	pumps.Wait()
	t.CompileBytes, t.CompileSeen = out.framed, out.seen
	code, _ = exitOf(st.status)
	return code == 0
}

// compileOut frames the compiler's output up to limit and counts the rest.
type compileOut struct {
	fr           *framer
	limit        int64
	framed, seen int64
}

func (c *compileOut) Write(p []byte) (int, error) {
	c.seen += int64(len(p))
	if room := c.limit - c.framed; room > 0 {
		chunk := p[:min(room, int64(len(p)))]
		if err := c.fr.frame(envelope.FrameCompile, chunk); err != nil {
			return 0, err
		}
		c.framed += int64(len(chunk))
	}
	return len(p), nil
}

// runCases runs every case of tests in order and frames each one's
// report; the trailer gets their count and digest. exit is 0 when every
// case ran and passed, else 1.
func runCases(fr *framer, px procEnv, tests *envelope.Tests, argv []string, t *envelope.Trailer) (exit int) {
	var digest envelope.CaseDigest
	defer func() { t.Cases, t.CasesSHA256 = digest.Count(), digest.Sum() }()
	path, err := lookPath(argv[0], px.env)
	if err != nil {
		t.Error = fmt.Sprintf("%s: command not found", argv[0])
		return exitNotFound
	}
	r := caseRunner{procEnv: px, path: path, argv: argv, limit: tests.OutputLimit}
	exit = 0
	for i, c := range tests.Cases {
		rep := r.run(i, c)
		b, _ := json.Marshal(rep) // plain fields only
		if err := fr.frame(envelope.FrameCase, b); err != nil {
			return 1
		}
		digest.Add(b)
		if rep.Verdict != envelope.CasePassed {
			exit = 1
			if tests.StopOnFirstFailure {
				break
			}
		}
	}
	return exit
}

// caseRunner runs the cases of one judged job: each is the same command
// with the case's arguments added, as a fresh process.
type caseRunner struct {
	procEnv
	path  string   // argv[0], resolved
	argv  []string // the command the cases share
	limit int64    // the bytes a case may write to each stream
}

// casePipes are a case's stdin, stdout and stderr: the child's ends and
// the launcher's.
type casePipes struct {
	inR, inW, outR, outW, errR, errW *os.File
}

func openCasePipes() (*casePipes, error) {
	var p casePipes
	var err error
	if p.inR, p.inW, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	if p.outR, p.outW, err = os.Pipe(); err != nil {
		p.inR.Close()
		p.inW.Close()
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	if p.errR, p.errW, err = os.Pipe(); err != nil {
		p.inR.Close()
		p.inW.Close()
		p.outR.Close()
		p.outW.Close()
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	return &p, nil
}

// run runs case i and judges it.
func (r caseRunner) run(i int, c envelope.Case) envelope.CaseReport {
	rep := envelope.CaseReport{Index: i}
	p, err := openCasePipes()
	if err != nil {
		rep.Verdict, rep.Error = envelope.CaseRuntimeErr, err.Error()
		return rep
	}
	oomsBefore := cgroupOOMs()
	start := time.Now()
	pid, err := syscall.ForkExec(r.path, append(append([]string{}, r.argv...), c.Args...), &syscall.ProcAttr{
		Dir: r.dir, Env: r.env,
		Files: []uintptr{p.inR.Fd(), p.outW.Fd(), p.errW.Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	p.inR.Close()
	p.outW.Close()
	p.errW.Close()
	if err != nil {
		p.inW.Close()
		p.outR.Close()
		p.errR.Close()
		code := startErr(err)
		rep.Verdict, rep.Exit, rep.Error = envelope.CaseRuntimeErr, &code, fmt.Sprintf("%s: %v", r.argv[0], err)
		return rep
	}
	over := make(chan struct{}, 1)
	stdout := newBoundedBuf(r.limit, r.limit, over)
	stderr := newBoundedBuf(envelope.MaxCaseStderr, r.limit, over)
	var io sync.WaitGroup
	io.Go(func() {
		// A case that does not read its stdin gets EPIPE here, or the
		// close below ends the write: either way it is the case's choice.
		_, _ = p.inW.Write(c.Stdin)
		p.inW.Close()
	})
	io.Go(func() { pump(stdout, p.outR) })
	io.Go(func() { pump(stderr, p.errR) })
	timer := time.NewTimer(time.Duration(c.TimeoutMS) * time.Millisecond)
	st, why := await(pid, true, r.sigs, r.chld, timer.C, over)
	timer.Stop()
	rep.DurationMS = time.Since(start).Milliseconds()
	// What the case left running is not the next case's business: its
	// group goes now, and any process that left the group after the pipes
	// had their grace.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	deadline := time.Now().Add(lingerGrace)
	_ = p.outR.SetReadDeadline(deadline)
	_ = p.errR.SetReadDeadline(deadline)
	_ = p.inW.SetWriteDeadline(deadline)
	io.Wait()
	quiesce()

	rss := st.usage.Maxrss * 1024
	cpu := (st.usage.Utime.Nano() + st.usage.Stime.Nano()) / 1e6
	rep.MaxRSS, rep.CPUMS = &rss, &cpu
	rep.StdoutN, rep.StderrN = stdout.n, stderr.n
	rep.Stderr = strings.ToValidUTF8(string(stderr.buf), "\uFFFD")
	r.judge(&rep, c, st, why, oomsBefore, stdout.buf)
	return rep
}

// judge gives the verdict of a case that ran: a kill of the launcher's,
// the memory limit, a signal, an exit status, or the comparison of its
// stdout with what was expected.
func (r caseRunner) judge(rep *envelope.CaseReport, c envelope.Case, st waited, why killReason, oomsBefore *int64, stdout []byte) {
	exit, sig := exitOf(st.status)
	oomsAfter := cgroupOOMs()
	switch {
	case why == killedTimeout:
		rep.Verdict = envelope.CaseTimeout
		rep.Error = fmt.Sprintf("killed at the case's time limit of %dms", c.TimeoutMS)
	case why == killedOutput:
		rep.Verdict = envelope.CaseOutputLimit
		rep.Error = fmt.Sprintf("wrote more than %d bytes to a stream", r.limit)
	case oomsAfter != nil && oomsBefore != nil && *oomsAfter > *oomsBefore && sig == int(syscall.SIGKILL):
		rep.Verdict, rep.Signal = envelope.CaseOOM, sig
		rep.Error = "killed by the sandbox's memory limit"
	case sig != 0:
		rep.Verdict, rep.Exit, rep.Signal = envelope.CaseRuntimeErr, &exit, sig
		rep.Error = fmt.Sprintf("killed by signal %d (%s)", sig, syscall.Signal(sig))
	case exit != 0:
		rep.Verdict, rep.Exit = envelope.CaseRuntimeErr, &exit
		rep.Error = fmt.Sprintf("exited with status %d", exit)
	default:
		rep.Exit = &exit
		if d := judge.Compare(c.Compare, c.Tolerance, c.Expected, stdout); d != nil {
			rep.Verdict, rep.Diff = envelope.CaseWrongAnswer, d
		} else {
			rep.Verdict = envelope.CasePassed
		}
	}
}

// cgroupOOMs reads the sandbox cgroup's OOM kill count.
func cgroupOOMs() *int64 {
	_, _, ooms := cgroupUsage()
	return ooms
}
