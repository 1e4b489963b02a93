// Command launcher is the entrypoint of a sandbox container. It blocks on
// stdin until an envelope arrives (so a container may be started before its
// job is known), unpacks the files into the working directory, runs the
// command with the rest of stdin as the job's stdin, and reports the exit
// status and usage figures in a trailer on stderr. It exits with the job's
// exit status, or 128+N when the job was killed by signal N.
//
// It must be built static (CGO_ENABLED=0): the image may have no libc the
// host's Go toolchain would link against.
package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandfleet/sandfleet/internal/envelope"
)

// Exit statuses of the launcher itself, as a shell would use them.
const (
	exitLauncher = 125 // the envelope or the working directory was unusable
	exitNoExec   = 126 // the command exists but could not be executed
	exitNotFound = 127 // the command does not exist
)

func main() {
	// The job runs as the same uid; without this it could read this process's
	// memory through /proc and learn the nonce that marks the trailer.
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0)
	os.Exit(run())
}

func run() int {
	h, err := envelope.Decode(os.Stdin)
	if err != nil {
		// No nonce to mark a trailer with: the executor sees a bare 125.
		fmt.Fprintf(os.Stderr, "sandfleet launcher: %v\n", err)
		return exitLauncher
	}
	fail := func(code int, format string, args ...any) int {
		msg := fmt.Sprintf(format, args...)
		fmt.Fprintf(os.Stderr, "sandfleet: %s\n", msg)
		finish(h.Nonce, envelope.Trailer{Exit: code, Error: msg})
		return code
	}
	dir := h.Dir
	if dir == "" {
		dir = envelope.DefaultDir
	}
	if err := unpack(dir, h.Files); err != nil {
		return fail(exitLauncher, "writing files: %v", err)
	}
	env := buildEnv(os.Environ(), h.Env, dir)
	path, err := lookPath(h.Argv[0], env)
	if err != nil {
		return fail(exitNotFound, "%s: command not found", h.Argv[0])
	}
	proc, err := os.StartProcess(path, h.Argv, &os.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
	})
	if err != nil {
		code := exitNoExec
		if errors.Is(err, fs.ErrNotExist) {
			code = exitNotFound
		}
		return fail(code, "%s: %v", h.Argv[0], err)
	}
	// Docker's init forwards signals to this process only; pass them on so
	// that a polite stop reaches the job.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for s := range sigs {
			_ = proc.Signal(s)
		}
	}()
	state, err := proc.Wait()
	signal.Stop(sigs)
	if err != nil {
		return fail(exitLauncher, "waiting for the job: %v", err)
	}
	t := envelope.Trailer{Exit: state.ExitCode()}
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Signal = int(ws.Signal())
		t.Exit = 128 + t.Signal
	}
	if ru, ok := state.SysUsage().(*syscall.Rusage); ok && ru != nil {
		rss := ru.Maxrss * 1024 // kilobytes on Linux
		cpu := ru.Utime.Nano() + ru.Stime.Nano()
		t.MaxRSSBytes, t.CPUNanos = &rss, &cpu
	}
	t.CgroupPeakBytes, t.CgroupCPUNanos, t.CgroupOOMKills = cgroupUsage()
	finish(h.Nonce, t)
	return t.Exit
}

// finish ends both streams with the trailer: stdout first, so that the
// trailer on stderr, the one the executor reads, comes last of all.
func finish(nonce string, t envelope.Trailer) {
	tr := envelope.AppendTrailer(nil, nonce, t)
	_, _ = os.Stdout.Write(tr)
	_, _ = os.Stderr.Write(tr)
}

func unpack(dir string, files []envelope.File) error {
	for _, f := range files {
		p := filepath.Join(dir, f.Name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
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
		if k, v, ok := strings.Cut(kv, "="); ok {
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
