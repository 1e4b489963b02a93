package main

// A persistent session's checkpoint: the working directory archived while
// the session lives, with the rules of a job's workspace (internal/archive)
// and the same guarantee of a tree nothing changes while it is read, which
// a job's archive gets by killing what the job left. A session's processes
// must outlive the checkpoint, so they are stopped (SIGSTOP) instead, and
// continued after, except those that were stopped already.

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/sandfleet/sandfleet/internal/archive"
	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// checkpoint serves OpArchive: the tar goes out as FrameArchive frames,
// then the reply with its size and digest.
func (a *agent) checkpoint(req *envelope.Request) *envelope.Reply {
	if req.MaxBytes <= 0 || req.MaxFiles <= 0 {
		return fail(req.ID, sessionapi.ErrInvalid, "archive: max_bytes and max_files must be positive")
	}
	// One at a time (the frames of two would interleave), and no process
	// started while the tree is read: spawn takes a.mu to fork.
	a.archiving.Lock()
	defer a.archiving.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	defer freeze()()
	aw := &archiveWriter{fr: a.fr, sum: sha256.New()}
	bw := bufio.NewWriterSize(aw, envelope.MaxFramePayload)
	root, err := os.OpenRoot(a.dir)
	if err != nil {
		return fail(req.ID, sessionapi.ErrFailed, "archive: %v", err)
	}
	defer root.Close()
	st, err := archive.Write(bw, root, nil, archive.Limits{MaxBytes: req.MaxBytes, MaxFiles: req.MaxFiles})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return fail(req.ID, sessionapi.ErrFailed, "archive: %v", err)
	}
	return &envelope.Reply{ID: req.ID, Archive: &envelope.ArchiveReport{
		Bytes: aw.n, SHA256: hex.EncodeToString(aw.sum.Sum(nil)), Files: st.Files, Skipped: st.Skipped}}
}

// freeze stops every process of the sandbox but PID 1 and waits, a second
// at most, until the kernel says each is stopped; it returns what continues
// those it stopped. Only as PID 1: kill(-1) from anywhere else would reach
// far more.
func freeze() (thaw func()) {
	if os.Getpid() != 1 {
		return func() {}
	}
	before := map[int]bool{} // stopped by the session itself: left so
	for pid, state := range states() {
		if state == 'T' || state == 't' {
			before[pid] = true
		}
	}
	_ = syscall.Kill(-1, syscall.SIGSTOP)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if !anyRunning() {
			break
		}
	}
	return func() {
		for pid := range states() {
			if !before[pid] {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		}
	}
}

func anyRunning() bool {
	for _, state := range states() {
		switch state {
		case 'T', 't', 'Z', 'X':
		default:
			return true
		}
	}
	return false
}

// states returns the state letter of each process but PID 1, as
// /proc/N/stat gives it.
func states() map[int]byte {
	out := map[int]byte{}
	des, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, d := range des {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == 1 {
			continue
		}
		if b, err := os.ReadFile("/proc/" + d.Name() + "/stat"); err == nil {
			out[pid] = procState(b)
		}
	}
	return out
}

// procState is the state in a /proc/N/stat line: "pid (comm) S ...", where
// comm may hold spaces and parentheses; the state follows the last ')'.
func procState(stat []byte) byte {
	for i := len(stat) - 1; i >= 0; i-- {
		if stat[i] == ')' {
			if i+2 < len(stat) {
				return stat[i+2]
			}
			break
		}
	}
	return '?'
}
