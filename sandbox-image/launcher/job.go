package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
)

// A job's run, step by step: its compile step, its test cases or its
// command, then the signed trailer.

// procEnv is where the launcher starts a job's processes, and the signals
// by which it hears of their end and forwards the engine's stops.
type procEnv struct {
	env        []string
	dir        string
	sigs, chld <-chan os.Signal
}

// launch is one job's run: its header, the framer onto the container's
// stdout, the prestarted interpreter it may hand the job to, and the
// trailer the steps fill in (what a compile step filled in is kept).
type launch struct {
	h    *envelope.Header
	seal envelope.Seal
	fr   *framer
	pre  *prestarted
	t    envelope.Trailer
}

func newLaunch(h *envelope.Header, pre *prestarted) *launch {
	seal := h.Seal()
	widenPipes(h)
	out := os.Stdout
	if err := syscall.SetNonblock(1, true); err == nil {
		out = os.NewFile(1, "stdout") // non-blocking: the poller's, not a thread's
	}
	return &launch{h: h, seal: seal, fr: &framer{out: out, n: map[byte]int64{}}, pre: pre}
}

// finish signs the trailer with the framed byte counts and sends it as the
// last frame; it returns the launcher's exit status.
func (l *launch) finish() int {
	l.fr.mu.Lock()
	l.t.StdoutBytes, l.t.StderrBytes = l.fr.n[envelope.FrameStdout], l.fr.n[envelope.FrameStderr]
	l.fr.mu.Unlock()
	_ = l.fr.frame(envelope.FrameTrailer, l.seal.Sign(l.t))
	return l.t.Exit
}

// fail ends the job before its command ran: the message goes to the job's
// stderr and into the trailer.
func (l *launch) fail(code int, format string, args ...any) int {
	l.pre.discard()
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintf(l.fr.writer(envelope.FrameStderr), "sandfleet: %s\n", msg)
	l.t.Exit, l.t.Error = code, msg
	return l.finish()
}

// compile runs the header's compile step; false means the job ends there,
// with the trailer ready to send.
func (l *launch) compile(px procEnv) bool {
	limit := l.h.CompileOutputLimit
	if limit <= 0 {
		limit = envelope.MaxCompileOutput
	}
	if compile(l.fr, px, l.h.Compile, limit, &l.t) {
		return true
	}
	l.t.Exit = *l.t.CompileExit
	if l.t.Exit == 0 {
		l.t.Exit = exitLauncher
	}
	l.t.CgroupPeakBytes, l.t.CgroupCPUNanos, l.t.CgroupOOMKills = cgroupUsage()
	return false
}

// cases runs the header's test cases and ends the job.
func (l *launch) cases(px procEnv) int {
	l.t.Exit = runCases(l.fr, px, l.h.Tests, l.h.Argv, &l.t)
	l.t.CgroupPeakBytes, l.t.CgroupCPUNanos, l.t.CgroupOOMKills = cgroupUsage()
	saveArchive(l.fr, px.dir, l.h.Archive, &l.t)
	return l.finish()
}

// command runs the job's command, in the prestarted interpreter when it
// fits, and ends the job.
func (l *launch) command(px procEnv) int {
	h := l.h
	path, err := lookPath(h.Argv[0], px.env)
	if err != nil {
		return l.fail(exitNotFound, "%s: command not found", h.Argv[0])
	}
	var pid int
	var outR, errR *os.File
	if l.pre.fits(h.Argv, h.Env, px.env) && l.pre.hand(px.dir, h.Argv, px.env) {
		pid, outR, errR = l.pre.pid, l.pre.outR, l.pre.errR
	} else {
		l.pre.discard()
		l.pre = nil
		if pid, outR, errR, err = start(path, h.Argv, px.dir, px.env); err != nil {
			code := exitNoExec
			if errors.Is(err, fs.ErrNotExist) {
				code = exitNotFound
			}
			return l.fail(code, "%s: %v", h.Argv[0], err)
		}
	}
	var pumps sync.WaitGroup
	pumps.Go(func() { pump(l.fr.writer(envelope.FrameStdout), outR) })
	pumps.Go(func() { pump(l.fr.writer(envelope.FrameStderr), errR) })
	// No deadline or cap here: the executor's timer and output cap end
	// the job from outside.
	st, _ := await(pid, false, px.sigs, px.chld, nil, nil)
	deadline := time.Now().Add(lingerGrace)
	_ = outR.SetReadDeadline(deadline)
	_ = errR.SetReadDeadline(deadline)
	pumps.Wait()

	t := &l.t
	t.Exit = st.status.ExitStatus()
	if st.status.Signaled() {
		t.Signal = int(st.status.Signal())
		t.Exit = 128 + t.Signal
	}
	rss := st.usage.Maxrss * 1024 // kilobytes on Linux
	cpu := st.usage.Utime.Nano() + st.usage.Stime.Nano()
	t.MaxRSSBytes, t.CPUNanos = &rss, &cpu
	t.CgroupPeakBytes, t.CgroupCPUNanos, t.CgroupOOMKills = cgroupUsage()
	sendDisplays(l.fr, t)
	saveArchive(l.fr, px.dir, h.Archive, t)
	return l.finish()
}
