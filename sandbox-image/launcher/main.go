// Command launcher is the entrypoint of a sandbox container and its PID 1.
// It blocks on stdin until an envelope arrives (so a container may be
// started before its job is known), unpacks the files into the working
// directory, and runs the command with the rest of stdin as the job's stdin
// and pipes of its own as the job's stdout and stderr, which it frames onto
// the container's stdout (see envelope.AppendFrame). When the job's process
// has ended it reports the exit status, the usage figures and the bytes it
// framed of each stream in a trailer signed with the envelope's key, the
// last frame (see envelope.Seal). It exits with the job's exit status, or
// 128+N when the job was killed by signal N.
//
// Everything that makes the verdict the launcher's and not the job's rests
// on three facts: the job never holds the container's streams (only its
// pipes); the launcher is not dumpable, so a process of the same uid cannot
// open its /proc/1/fd, read its memory (the key) or trace it; and as PID 1
// of the sandbox's pid namespace it receives only the signals it handles
// (never SIGKILL or SIGSTOP from inside), and it handles each by forwarding
// or ignoring it. The sandbox's seccomp profile denies ptrace besides.
//
// It must be built static (CGO_ENABLED=0): the image may have no libc the
// host's Go toolchain would link against.
package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
)

// Exit statuses of the launcher itself, as a shell would use them.
const (
	exitLauncher = 125 // the envelope or the working directory was unusable
	exitNoExec   = 126 // the command exists but could not be executed
	exitNotFound = 127 // the command does not exist
)

// lingerGrace is how long output may still arrive after the job's process
// ended: what its pipes held, or what a descendant that outlived it writes.
// Past it the pipes are cut; what came later is not the job's.
const lingerGrace = 100 * time.Millisecond

// forwarded are the signals passed on to the job: the polite stops an
// engine or an operator sends to a container.
var forwarded = map[os.Signal]bool{
	syscall.SIGTERM: true, syscall.SIGINT: true, syscall.SIGHUP: true, syscall.SIGQUIT: true,
	syscall.SIGUSR1: true, syscall.SIGUSR2: true,
}

func main() {
	// Not dumpable before anything else: the job runs as the same uid.
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0)
	// The launcher must not need a new OS thread once the job runs: a job
	// that exhausts the pids limit would make the Go runtime fail to create
	// one, which is fatal, and the verdict would be lost. So one P, and no
	// syscall that blocks a thread: the pipes and the container's stdout go
	// through the runtime's poller, and children are reaped on SIGCHLD
	// without waiting.
	runtime.GOMAXPROCS(1)
	// Every signal comes here, so that none sent by the job (a SIGSEGV, say)
	// reaches the Go runtime's default of crashing. Faults of the launcher's
	// own still crash it: the kernel marks those as not sent by a process.
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs)
	// SIGCHLD also on a channel of its own: a job flooding PID 1 with
	// other signals may fill sigs, and one pending SIGCHLD is enough, since
	// each reaps every child that has exited.
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	os.Exit(run(sigs, chld))
}

// framer writes frames to the container's stdout, whole, one at a time,
// counting the payload bytes of each kind. Only the launcher writes there.
type framer struct {
	mu  sync.Mutex
	out *os.File
	buf []byte
	n   map[byte]int64
}

func (f *framer) frame(kind byte, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for first := true; first || len(p) > 0; first = false {
		chunk := p[:min(len(p), envelope.MaxFramePayload)]
		p = p[len(chunk):]
		f.buf = envelope.AppendFrame(f.buf[:0], kind, chunk)
		if _, err := f.out.Write(f.buf); err != nil {
			return err
		}
		f.n[kind] += int64(len(chunk))
	}
	return nil
}

// raw writes b, whole frames already, at once.
func (f *framer) raw(b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, _ = f.out.Write(b)
}

// writer is what frames of one kind look like to io.Writer users.
func (f *framer) writer(kind byte) io.Writer { return frameWriter{f, kind} }

type frameWriter struct {
	f    *framer
	kind byte
}

func (w frameWriter) Write(p []byte) (int, error) {
	if err := w.f.frame(w.kind, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func run(sigs, chld <-chan os.Signal) int {
	warmed := warmThreads(spareThreads)
	pre := prestart(envelope.DefaultDir)
	h, err := envelope.Decode(os.Stdin)
	if err != nil {
		// No key to sign a trailer with: the executor finds no verdict.
		fmt.Fprintf(os.Stderr, "sandfleet launcher: %v\n", err)
		return exitLauncher
	}
	l := newLaunch(h, pre)
	dir := h.Dir
	if dir == "" {
		dir = envelope.DefaultDir
	}
	restored, err := restore(dir, h.Restore, os.Stdin)
	if err != nil {
		return l.fail(exitLauncher, "restoring the workspace: %v", err)
	}
	if err := unpack(dir, h.Files, restored); err != nil {
		return l.fail(exitLauncher, "writing files: %v", err)
	}
	px := procEnv{env: buildEnv(os.Environ(), h.Env, dir), dir: dir, sigs: sigs, chld: chld}
	<-warmed
	if h.Session != nil {
		l.pre.discard()
		return serveSession(h, l.fr, dir, sigs, chld)
	}
	if len(h.Compile) > 0 || h.Tests != nil {
		// A compile step or test cases start processes of their own.
		l.pre.discard()
		l.pre = nil
	}
	if len(h.Compile) > 0 && !l.compile(px) {
		return l.finish()
	}
	if h.Tests != nil {
		return l.cases(px)
	}
	return l.command(px)
}

// start runs the job's command with pipes of the launcher's as its stdout
// and stderr and the container's stdin as its own.
func start(path string, argv []string, dir string, env []string) (pid int, outR, errR *os.File, err error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return 0, nil, nil, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return 0, nil, nil, fmt.Errorf("stderr pipe: %w", err)
	}
	pid, err = syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: []uintptr{0, outW.Fd(), errW.Fd()},
	})
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return 0, nil, nil, err
	}
	return pid, outR, errR, nil
}

// pump frames the job's pipe r onto the container's stdout through w until
// the pipe ends or its read deadline passes. Reads and writes alternate, so
// the count is exact whenever it stops.
func pump(w io.Writer, r *os.File) {
	defer r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

type waited struct {
	status syscall.WaitStatus
	usage  syscall.Rusage
}

// reap collects every child of this process that has exited, without
// waiting, as PID 1 must: the job and whatever of its descendants outlived
// their parents and were handed to PID 1. done reports that the job itself
// was among them, with its status in st.
func reap(job int, st waited) (_ waited, done bool) {
	for {
		var w waited
		pid, err := syscall.Wait4(-1, &w.status, syscall.WNOHANG, &w.usage)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return st, done // ECHILD, or nothing more has exited
		}
		if pid == job {
			st, done = w, true
		}
	}
}

// unpack writes the job's files into dir. Over a restored workspace
// (replace), a file replaces what was there under its name, a link
// included; otherwise dir is a fresh tmpfs.
func unpack(dir string, files []envelope.File, replace bool) error {
	for _, f := range files {
		p := filepath.Join(dir, f.Name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if replace {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		mode := fs.FileMode(f.Mode)
		if mode == 0 {
			mode = 0o644
		}
		// O_EXCL|O_NOFOLLOW: the directory is a fresh tmpfs, so anything
		// already there is a surprise worth failing on.
		fd, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
		if err != nil {
			return err
		}
		_, werr := fd.Write(f.Data)
		cerr := fd.Close()
		if werr != nil {
			return fmt.Errorf("%s: %w", f.Name, werr)
		}
		if cerr != nil {
			return fmt.Errorf("%s: %w", f.Name, cerr)
		}
	}
	return nil
}

// buildEnv starts from the image's environment, points HOME at the working
// directory (the only writable home there is) and applies the job's env.
func buildEnv(base []string, job map[string]string, dir string) []string {
	m := make(map[string]string, len(base)+len(job)+1)
	var order []string
	set := func(k, v string) {
		if _, ok := m[k]; !ok {
			order = append(order, k)
		}
		m[k] = v
	}
	for _, kv := range base {
		if k, v, ok := strings.Cut(kv, "="); ok && k != prestartEnv && k != prestartPreloadEnv {
			set(k, v)
		}
	}
	set("HOME", dir)
	for k, v := range job {
		set(k, v)
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+m[k])
	}
	return out
}

// lookPath resolves name against the PATH the job will see, not the
// launcher's own.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fs.ErrNotExist
}

// cgroupUsage reads the container's own cgroup: v2 first, then v1. A
// figure the kernel does not offer (memory.peak needs Linux 5.19) is nil.
func cgroupUsage() (peak, cpu, ooms *int64) {
	for _, p := range []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"} {
		if ooms = readField(p, "oom_kill "); ooms != nil {
			break
		}
	}
	peak = readInt("/sys/fs/cgroup/memory.peak")
	if peak == nil {
		peak = readInt("/sys/fs/cgroup/memory/memory.max_usage_in_bytes")
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/cpu.stat"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
					n *= 1000
					cpu = &n
				}
			}
		}
	}
	for _, p := range []string{"/sys/fs/cgroup/cpuacct/cpuacct.usage", "/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage"} {
		if cpu == nil {
			cpu = readInt(p)
		}
	}
	return peak, cpu, ooms
}

// readField reads the number after key in a "key value" per line file.
func readField(path, key string) *int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n >= 0 {
				return &n
			}
		}
	}
	return nil
}

func readInt(path string) *int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return nil
	}
	return &n
}

// spareThreads is how many OS threads the launcher has the runtime start
// before the job runs. Even with one P and no blocking I/O, the runtime
// hands its P to another thread now and then (os/signal's receiving
// goroutine sleeps in a blocking call); once a job has exhausted the pids
// limit, creating that thread would fail, which is fatal. Idle threads are
// kept by the runtime, so starting them first is enough.
const spareThreads = 8

// warmThreads makes the runtime start about n threads: n goroutines sleep
// in a blocking system call at once, and each time one blocks the runtime
// gives its P to a new thread for the others. It runs while the launcher
// waits for its envelope; the channel is closed when it is done.
func warmThreads(n int) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				ts := syscall.Timespec{Nsec: 20e6}
				_ = syscall.Nanosleep(&ts, nil)
			})
		}
		wg.Wait()
	}()
	return done
}
