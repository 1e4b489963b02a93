package main

// A workspace's snapshot is restored and written here, inside the sandbox
// and as its user, so that a hostile snapshot can do no more than the job
// itself could: the worker never unpacks one on its host. The rules of what
// a snapshot may hold are internal/archive's.

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/sandfleet/sandfleet/internal/archive"
	"github.com/sandfleet/sandfleet/internal/envelope"
)

// restore unpacks the snapshot that follows the header on stdin into dir,
// reading exactly its announced bytes, so that what stdin holds next is the
// job's. It reports whether there was one: the job's files then replace
// what it held under their names.
func restore(dir string, r *envelope.Restore, stdin io.Reader) (bool, error) {
	if r == nil {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return true, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return true, err
	}
	defer root.Close()
	sum := sha256.New()
	in := io.TeeReader(io.LimitReader(stdin, r.Bytes), sum)
	if _, err := archive.Extract(root, in, archive.Limits{MaxBytes: r.MaxBytes, MaxFiles: r.MaxFiles}); err != nil {
		return true, err
	}
	// The archive's end may leave padding unread.
	if _, err := io.Copy(io.Discard, in); err != nil {
		return true, err
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != r.SHA256 {
		return true, fmt.Errorf("the snapshot's sha256 is %s, not the %s announced", got, r.SHA256)
	}
	return true, nil
}

// pipeBytes is the size the launcher asks of stdin's pipe when a snapshot
// comes through it, and of stdout's when an archive goes out: a pipe's 64
// KiB default makes a megabyte sixteen hand-offs between the container's
// shim and the launcher each way, which cost a 1 MiB workspace 6 ms of its
// step. Each pipe takes this much memory while it is full, from
// its user's pipe allowance (fs.pipe-user-pages-soft, the sandbox's own:
// the executor gives each a uid of its own): only a job that moves a
// workspace asks.
const pipeBytes = 1 << 20

// widenPipes asks for pipeBytes on the pipes a workspace's bytes take.
// A refusal (the uid's allowance spent, or stdio not a pipe) only leaves
// the transfer as fast as before.
func widenPipes(h *envelope.Header) {
	if h.Restore != nil && h.Restore.Bytes > 64<<10 {
		_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, 0, syscall.F_SETPIPE_SZ, pipeBytes)
	}
	if h.Archive != nil {
		_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, 1, syscall.F_SETPIPE_SZ, pipeBytes)
	}
}

// saveArchive archives dir after the job, as the header's Archive asks,
// onto the container's stdout as FrameArchive frames, and records its
// size, digest and counts in t for the signed trailer. Every other process
// of the sandbox is stopped first: nothing may change the tree while it is
// read.
func saveArchive(fr *framer, dir string, a *envelope.Archive, t *envelope.Trailer) {
	if a == nil {
		return
	}
	quiesce()
	aw := &archiveWriter{fr: fr, sum: sha256.New()}
	bw := bufio.NewWriterSize(aw, envelope.MaxFramePayload)
	var keep func(string) bool
	if !a.All {
		keep = func(name string) bool { return archive.MatchAny(a.Outputs, name) }
	}
	st, err := func() (archive.Stats, error) {
		root, err := os.OpenRoot(dir)
		if err != nil {
			return archive.Stats{}, err
		}
		defer root.Close()
		st, err := archive.Write(bw, root, keep, archive.Limits{MaxBytes: a.MaxBytes, MaxFiles: a.MaxFiles})
		if ferr := bw.Flush(); err == nil {
			err = ferr
		}
		return st, err
	}()
	t.ArchiveBytes, t.ArchiveSHA256 = aw.n, hex.EncodeToString(aw.sum.Sum(nil))
	t.ArchiveFiles, t.ArchiveSkipped = st.Files, st.Skipped
	for _, s := range st.Skips {
		t.ArchiveSkips = append(t.ArchiveSkips, envelope.ArchiveSkip{Name: s.Name, Reason: s.Reason})
	}
	if err != nil {
		t.ArchiveError = err.Error()
	}
}

// archiveWriter frames what it is given as FrameArchive and hashes exactly
// what was framed.
type archiveWriter struct {
	fr  *framer
	sum hash.Hash
	n   int64
}

func (w *archiveWriter) Write(p []byte) (int, error) {
	if err := w.fr.frame(envelope.FrameArchive, p); err != nil {
		return 0, err
	}
	w.sum.Write(p)
	w.n += int64(len(p))
	return len(p), nil
}

// quiesce kills every process of the sandbox but the launcher (what the
// job left running) and waits, a second at most, until they are gone and
// reaped: a zombie still counts against the pids limit, and the launcher
// may not be refused a thread. Only as PID 1: kill(-1) from anywhere else
// would reach far more.
func quiesce() {
	if os.Getpid() != 1 {
		return
	}
	_ = syscall.Kill(-1, syscall.SIGKILL)
	deadline := time.Now().Add(time.Second)
	for {
		reap(0, waited{}) // every child that has exited; none is the job now
		if !othersAlive() || time.Now().After(deadline) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// othersAlive reports whether /proc shows a process other than PID 1 that
// has not exited.
func othersAlive() bool {
	des, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, d := range des {
		if pid, err := strconv.Atoi(d.Name()); err == nil && pid != 1 {
			if b, err := os.ReadFile("/proc/" + d.Name() + "/stat"); err == nil && !zombie(b) {
				return true
			}
		}
	}
	return false
}

// zombie reports whether a /proc/N/stat line says the process has exited.
func zombie(stat []byte) bool {
	// "pid (comm) S ...": comm may hold spaces and parentheses; the
	// state follows the last ')'.
	for i := len(stat) - 1; i >= 0; i-- {
		if stat[i] == ')' {
			return i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
		}
	}
	return false
}
