package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// DeniedSyscalls are the calls the sandbox's seccomp profile refuses with
// EPERM although Docker's default profile allows them, some only on newer
// kernels or with a capability a sandbox never has. A job has no use for
// any of them, and each has been a way to reach another process or the
// kernel's less-travelled paths:
//   - ptrace, process_vm_readv/writev, kcmp, pidfd_getfd: reach into
//     another process (the launcher is PID 1 and not dumpable besides);
//   - io_uring_*: a second syscall surface that seccomp cannot filter
//     (Docker 20.10's default profile still allows it);
//   - userfaultfd: the usual tool for widening kernel race windows;
//   - bpf, perf_event_open: kernel attack surface, and perf reads the host's
//     counters;
//   - keyctl, add_key, request_key: the kernel keyrings are not namespaced;
//   - unshare, setns, mount, umount2, pivot_root, chroot: namespaces and
//     mounts (already tied to capabilities the sandbox drops; listed so
//     the profile says so itself).
//
// personality keeps only what AllowedPersonalities lists.
var DeniedSyscalls = []string{
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"userfaultfd",
	"bpf", "perf_event_open",
	"keyctl", "add_key", "request_key",
	"unshare", "setns", "mount", "umount2", "pivot_root", "chroot",
}

// AllowedPersonalities are the personality(2) arguments a job may pass:
// PER_LINUX and the query 0xffffffff. Docker's default also allows
// PER_LINUX32 and UNAME26, which change what uname(2) reports (the old
// trick for kernel info leaks and exploit targeting); Docker already
// refuses ADDR_NO_RANDOMIZE and the rest.
var AllowedPersonalities = []uint64{0, 0xffffffff}

// SeccompProfile returns the sandbox's seccomp profile as the JSON Docker
// takes: Docker's default profile (github.com/moby/profiles/seccomp, the
// one the engine itself would apply, kept current by its maintainers)
// without DeniedSyscalls, which a last rule refuses explicitly, and with
// personality narrowed to AllowedPersonalities (the profile's default
// action, EPERM, refuses the rest).
var SeccompProfile = sync.OnceValue(func() []byte { return buildProfile(false) })

// gVisorSeccompProfile is SeccompProfile for gVisor's runtimes. Docker's
// profile answers clone3 with ENOSYS (errnoRet), so that glibc falls back
// to clone, whose flags the profile can check; gVisor before 2023 ignores
// errnoRet and answers EPERM, and glibc then starts no thread at all. So
// there clone3 is SCMP_ACT_TRACE, which with no tracer is ENOSYS in gVisor
// and Linux alike: no tracer can exist in a sandbox, which may not ptrace.
var gVisorSeccompProfile = sync.OnceValue(func() []byte { return buildProfile(true) })

// seccompProfile is the profile of a sandbox of runtime.
func seccompProfile(runtime string) []byte {
	if isGVisor(runtime) {
		return gVisorSeccompProfile()
	}
	return SeccompProfile()
}

func buildProfile(gVisor bool) []byte {
	p := seccomp.DefaultProfile()
	kept := p.Syscalls[:0]
	for _, rule := range p.Syscalls {
		rule.Names = slices.DeleteFunc(rule.Names, func(n string) bool { return slices.Contains(DeniedSyscalls, n) })
		if slices.Equal(rule.Names, []string{"personality"}) && len(rule.Args) == 1 &&
			!slices.Contains(AllowedPersonalities, rule.Args[0].Value) {
			continue
		}
		if gVisor && slices.Equal(rule.Names, []string{"clone3"}) && rule.Action == specs.ActErrno {
			rule.Action = specs.ActTrace
		}
		if len(rule.Names) > 0 {
			kept = append(kept, rule)
		}
	}
	eperm := uint(1)
	p.Syscalls = append(kept, &seccomp.Syscall{LinuxSyscall: specs.LinuxSyscall{
		Names:    slices.Clone(DeniedSyscalls),
		Action:   specs.ActErrno,
		ErrnoRet: &eperm,
	}})
	b, _ := json.Marshal(p) // plain data: cannot fail
	return b
}

// seccompFile writes the profile b to a file named by its hash in the
// temporary directory and returns the path, for `docker run
// --security-opt seccomp=PATH`, which takes a file where the API takes the
// JSON itself.
func seccompFile(b []byte) (string, error) {
	sum := sha256.Sum256(b)
	path := filepath.Join(os.TempDir(), "sandfleet-seccomp-"+hex.EncodeToString(sum[:8])+".json")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	tmp, err := os.CreateTemp(os.TempDir(), "sandfleet-seccomp-*")
	if err != nil {
		return "", err
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return path, os.Rename(tmp.Name(), path)
}
