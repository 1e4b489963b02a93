// Package executor runs one job in one ephemeral, hardened Docker container.
//
// Run returns a Result for every outcome of the job itself (succeeded,
// failed, timeout, oom, output_limit, canceled, and rejected for a job this
// executor cannot accept: an unknown preset, limits over the caps). It
// returns an error only for infrastructure failures (daemon unreachable,
// image missing, sandboxes that do not start), which wrap ErrInfrastructure
// so that the caller can back off and retry instead of charging the job.
//
// # Lifecycle
//
// create → attach (stdin, stdout, stderr) → ContainerWait registered →
// start → the envelope (argv, env, files, a nonce) and the job's stdin are
// written to the container's stdin, then closed → stdout and stderr are
// demultiplexed into buffers capped at the output limit → wait → inspect →
// force remove, with a context of its own, on every path. The in-image
// launcher (sandbox-image/launcher) unpacks the envelope into the tmpfs
// working directory and runs the command; nothing about the job is in the
// container's configuration but its limits and labels, so a container could
// be started before its job is known.
//
// # Warm pool
//
// With Config.Pool > 0 the executor keeps that many sandboxes per preset
// image launched ahead of time (created, attached, watched, started: the
// launcher blocks on stdin) with the default limits. A job whose resolved
// limits equal the defaults in everything the container is configured with
// (all but the timeout, which is the executor's timer) is handed the oldest
// live one: only its envelope is written, and its clock starts then. Each
// warm sandbox serves one job and is removed like any other, so nothing
// of a job survives into the next. Other jobs, and every job while the pool
// is empty, get a fresh container. The pool refills in the background, one
// goroutine per missing sandbox, once the job that took a sandbox is done
// (launching during it would compete with it for the engine and the CPU);
// after a failed launch it pauses with an
// exponential back-off (Check ends it early), and while sandboxes do not
// start it does not launch at all (PoolStats.Halted, and a log line). Idle
// sandboxes whose stream
// ended (the container died, the connection broke) or older than
// Config.PoolMaxAge are retired. Close removes the pool.
//
// # When sandboxes do not start
//
// An engine that answers its ping may still fail every start: a runtime
// registered wrongly (runsc without --network=none), a host out of PIDs. A
// launch that fails while the ping answers is a start failure: its error is
// a *StartError ("runtime runsc: cannot start sandboxes: ..."), wrapping
// ErrSandboxStart and ErrInfrastructure. Its container is removed and
// checked gone. From then on launches are attempts, one at a time: the
// next is due after a back-off of 2 s doubling to 30 s, which no ping
// resets, and no more than 6 fail in any minute. Between attempts Run and
// Check return the StartError at once and make no container (RetryAfter
// says when the next is due); the first launch that starts a sandbox ends
// the fault. Check makes the attempts when none is in flight: it launches a
// throwaway sandbox before saying yes, so a worker that checks before
// taking jobs knows that its runtime works. Until a first sandbox started,
// launches go one at a time too, so a runtime broken from the start costs
// one container, not one per slot and warm sandbox.
//
// Every call to the engine has a deadline of its own (callDeadlines in
// docker.go) and is abandoned at it, even if the client does not return:
// a wedged engine costs a call its deadline, never a hang.
//
// # The end of a job
//
// The launcher ends stdout and stderr with its trailer, which carries the
// exit status, the usage figures and the cgroup's OOM kill count. Once both
// streams have it, the verdict is known: the executor does not wait for the
// engine to tear the container down and report its exit (most of a trivial
// job's time), and removes it in the background (Close waits for those
// removals). When the trailer is missing or lacks the OOM count (a killed
// launcher, an older image), it waits for the exit and inspects the state.
//
// # Verdicts
//
// In order: the caller's context canceled → canceled (the container is
// killed); the wall-clock limit, counted from the hand-off of the envelope
// → timeout; an OOM kill in the sandbox's cgroup (the trailer's count, or
// the state's OOMKilled flag; never exit 137 alone) → oom; more than the
// output limit on either stream → output_limit (the container is killed at once, output is
// kept up to the cap); exit 0 → succeeded; else failed with the exit code,
// 128+N when the job's process was killed by signal N (Error says which).
//
// # Usage figures
//
// The launcher reports, in a trailer on stderr marked with a nonce that the
// job cannot read, the cgroup's peak memory and CPU time (v1 or v2) and,
// failing those, wait4's max RSS and CPU time. A job killed before it could
// report (timeout, oom, output_limit, canceled) has null figures: they are
// never estimated.
//
// # A uid per sandbox
//
// Each sandbox runs as a host uid (and gid) of its own from Config.UIDs,
// which owns its tmpfs mounts: the kernel counts pipe pages, inotify
// instances and queued signals per user, and sandboxes of one uid would
// share them. Its container is named sandfleet-uid-<uid>, and the engine
// refuses a second container of a name: that is the claim, held while the
// container exists, whichever worker or run made it (a warm sandbox, a
// leftover the reaper has not removed yet). A create that meets a
// conflict claims another uid.
//
// The uid is the user "sandbox" (SandboxUser), home /workspace: its
// container mounts, read-only, an /etc/passwd and /etc/group of its own,
// the image's (read once per image ID from a container that is never
// started) without any entry of the uid or the name, plus its entry. They
// are written under os.TempDir(), as the egress CA bundle is, before the
// create, and removed when the uid is freed (users.go).
//
// # Leftovers
//
// Every container carries the labels sandfleet.managed=true,
// sandfleet.worker=<Config.WorkerID>, sandfleet.instance=<one per Executor>,
// sandfleet.uid=<its uid> and either sandfleet.job=<id> or, launched for
// the warm pool, sandfleet.pool=true. A worker calls Reap at start to remove what a crashed
// predecessor with the same ID left, its warm pool included; Reap spares the
// calling Executor's own containers, and skips, after one log line, a
// container it failed to remove (one wedged in the engine). StartService
// does that in the background, retrying until the engine lists its
// containers, so that a worker's start-up does not wait on the engine.
//
// # Stuck removals
//
// A container whose removal fails (the engine answers an error, or not in
// time: "Could not kill running container ..., cannot remove") is retried
// in the background while the executor runs, 1 s after the failure and
// then doubling up to every 5 minutes, until it is gone: a sandbox of its
// own, a launch's that failed, and a leftover Reap could not remove alike.
// Until then its uid stays claimed (the container keeps its name, which is
// the claim on the engine) and its egress network stays. Unremovable says
// how many there are; the worker exports it and fails /readyz past a
// threshold. Close stops the retries and tries each once more (5 s in
// all); what is left, the next start's Reap
// removes.
package executor
