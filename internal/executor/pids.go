package executor

import "strings"

// A job's limits.Pids bounds its processes and threads, and must mean the
// same under every runtime. Two things hold it:
//
//   - RLIMIT_NPROC, set to Pids for the sandbox's processes: it counts the
//     tasks of the sandbox's uid, and every sandbox has a uid of its own,
//     so it is the sandbox's own count. runc leaves it to the host's
//     kernel; gVisor keeps the count in its own kernel, over the job's
//     tasks only. At the limit fork and clone fail with EAGAIN, and the
//     sandbox goes on: the launcher reports the job's verdict.
//   - the container's pids cgroup on the host (PidsLimit). Under runc it
//     holds the same tasks, and is set to Pids as well. Under gVisor it
//     also holds gVisor's own: its kernel's and file proxy's threads, and
//     on its ptrace platform a stub process per address space of the job
//     with a thread for each of gVisor's threads that ran it. Those are
//     not the job's, and gVisor dies when it cannot make one (its Go
//     runtime cannot start a thread, or a stub cannot be cloned: exit 2,
//     the verdict lost with it). So there the cgroup gets gVisorPids: a
//     bound for the host, out of reach of a job that keeps to its limit.

// gVisor's own tasks, as measured on its ptrace platform (Debian's runsc
// 20221219, two cores, both busy): about 40 threads of its kernel and
// file proxy at rest, up to about 100 under load; a fork bomb held at N
// processes takes 5 to 7 host tasks per process (its stub and the stub's
// threads); 16 processes of 3 threads, all making system calls in a loop,
// 790 at a limit of 64. What no bound linear in N covers: many processes
// entering and leaving the kernel at once make a stub thread per pair of
// process and gVisor thread (60 of them at a limit of 64: 4,700 tasks).
// Such a job ends its own sandbox at the cgroup, no other, and the host
// keeps the rest of its pids.
const (
	gVisorBaseTasks   = 256
	gVisorTasksPerPid = 16
)

// gVisorPids is the host-side pids limit of a gVisor sandbox whose job may
// have pids processes and threads.
func gVisorPids(pids int64) int64 {
	return gVisorBaseTasks + gVisorTasksPerPid*pids
}

// isGVisor says whether the runtime name is one of gVisor's: "runsc" and
// the names deploy/runsc.sh registers besides it ("runsc-net").
func isGVisor(runtime string) bool {
	return runtime == "runsc" || strings.HasPrefix(runtime, "runsc-")
}

// hostPids is the PidsLimit of a sandbox of runtime whose job may have
// pids processes and threads.
func hostPids(runtime string, pids int64) int64 {
	if isGVisor(runtime) {
		return gVisorPids(pids)
	}
	return pids
}
