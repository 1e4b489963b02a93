package main

// An exclusive command: one that runs with no other process of the
// sandbox alive. A session's processes run as the command's uid, so any
// of them may open /proc/<pid>/fd/1 of a new command and write into its
// stdout pipe (and, under gVisor, the agent's ends of the pipes through
// /proc/1/fd): the reply would carry what they wrote as the command's.
// Only the absence of every other process rules that out, which is what
// a harness grading a session's work in its own sandbox needs. So the
// agent, PID 1, kills them all (SIGKILL to -1 reaches every process it may
// signal, whatever its group, session or state: a stopped process dies
// too) until /proc lists none but itself, lets nothing else start, and
// only then starts the command. A process that outlives every SIGKILL
// for soleGrace (one the agent may not signal) fails the call: the
// command never runs unprotected.

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// soleGrace bounds how long the other processes may take to die. One
// SIGKILL to -1 usually ends them all (Linux aborts a fork whose parent
// it reaches meanwhile); the loop is for a child born in between, and for
// a runtime that sends otherwise.
const soleGrace = 5 * time.Second

// errSole is a start refused while an exclusive command runs.
var errSole = errors.New("an exclusive command is running: no other process may start until it has ended")

func (a *agent) execExclusive(id uint64, req *sessionapi.ExecRequest, argv []string, cwd string, env []string) *envelope.Reply {
	if req.Background {
		return fail(id, sessionapi.ErrInvalid, "exclusive: not with background (it ends every other process)")
	}
	ended, err := a.takeSole()
	if err != nil {
		return fail(id, sessionapi.ErrFailed, "exclusive: %v", err)
	}
	defer a.releaseSole()
	p, stdin, outR, errR, err := a.start(true, argv, cwd, env, len(req.Stdin) > 0)
	if err != nil {
		return fail(id, sessionapi.ErrFailed, "%v", err)
	}
	r := a.foreground(id, req, p, stdin, outR, errR)
	r.Exclusive, r.Ended = true, ended
	return done(id, r)
}

// takeSole stops any process from starting, then ends every process of
// the sandbox but the agent; it returns how many there were.
func (a *agent) takeSole() (int, error) {
	if os.Getpid() != 1 {
		// kill(-1) from anywhere else would reach far more.
		return 0, errors.New("only the sandbox's PID 1 may end the other processes")
	}
	a.mu.Lock()
	busy := a.sole
	a.sole = true
	a.mu.Unlock()
	if busy {
		return 0, errSole
	}
	ended, err := a.endOthers(time.Now().Add(soleGrace))
	if err != nil {
		a.releaseSole()
		return 0, err
	}
	return ended, nil
}

func (a *agent) releaseSole() {
	a.mu.Lock()
	a.sole = false
	a.mu.Unlock()
}

// endOthers kills every other process until /proc lists none, reaping
// those handed to PID 1; it counts those that were not zombies already.
func (a *agent) endOthers(deadline time.Time) (int, error) {
	ended := map[int]bool{}
	for {
		left, err := countOthers(ended)
		if err != nil {
			return 0, err
		}
		if left == 0 {
			return len(ended), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d processes of the session outlived SIGKILL for %s; the command was not run", left, soleGrace)
		}
		_ = syscall.Kill(-1, syscall.SIGKILL)
		a.collect()
		time.Sleep(time.Millisecond) // the kernel's exit of what was killed
	}
}

// countOthers counts the processes /proc lists besides PID 1, adding to
// seen those that are not zombies (the processes that were running).
// Zombies count as alive until reaped: a group whose leader has exited
// shows as one while its other threads still run.
func countOthers(seen map[int]bool) (int, error) {
	des, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range des {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == 1 {
			continue
		}
		n++
		if b, err := os.ReadFile("/proc/" + d.Name() + "/stat"); err == nil && procState(b) != 'Z' {
			seen[pid] = true
		}
	}
	return n, nil
}
