package executor

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// outcome is what a job's run amounts to, before it becomes a Result.
type outcome struct {
	status                   jobs.Status
	msg                      string
	exit                     *int
	stdout, stderr           []byte
	stdoutTrunc, stderrTrunc bool
	started, finished        time.Time
	cpuMS, peakBytes         *int64
	container                string
	archive                  archiveVerdict
}

// archiveVerdict is what the trailer says of the archive, if it checks.
type archiveVerdict struct {
	signed         bool // a signed trailer covers exactly the archive that came
	files, skipped int
	err            string // the launcher's reason it is incomplete
}

// errNoVerdict is the message of a job whose launcher gave no trailer that
// checks under its seal: killed, crashed, or impersonated. What the job's
// own processes did then is not known, so the job failed.
const errNoVerdict = "the sandbox's launcher gave no verdict"

// verdict judges what watch observed. Who decides what, in order:
//   - the executor's own kills (cancel, wall clock) decide first;
//   - an OOM kill seen by the engine or the sandbox's cgroup comes next;
//   - output past the cap, as counted by the executor, is output_limit;
//   - only then the launcher's trailer, and only one signed with the job's
//     seal, in a stream whose framing held, whose byte counts (and
//     archive's size and digest) match what arrived: its exit status is
//     the job's. Without one the job failed,
//     whatever the container's exit status was, since a job that silenced
//     the launcher could choose that.
func verdict(o observed, seal envelope.Seal, lim limits.Limits) *outcome {
	out := &outcome{started: o.started, finished: o.finished, stdout: o.stdout, stderr: o.stderr}
	capped := int64(lim.Output)
	out.stdoutTrunc, out.stderrTrunc = o.stdoutN > capped, o.stderrN > capped
	t, signed := seal.Open(o.trailer)
	signed = signed && o.framesBroken == nil && t.StdoutBytes == o.stdoutN && t.StderrBytes == o.stderrN &&
		t.ArchiveBytes == o.archiveN && t.ArchiveSHA256 == o.archiveSHA
	if signed && o.killed == "" {
		out.archive = archiveVerdict{signed: true, files: t.ArchiveFiles, skipped: t.ArchiveSkipped, err: t.ArchiveError}
	}
	code := int(o.exitCode)
	if signed {
		code = t.Exit
		out.cpuMS = nanosToMS(firstNonNil(t.CgroupCPUNanos, t.CPUNanos))
		out.peakBytes = firstNonNil(t.CgroupPeakBytes, t.MaxRSSBytes)
	}
	oom := o.engineOOM || (signed && t.CgroupOOMKills != nil && *t.CgroupOOMKills > 0)

	switch {
	case o.killed == jobs.StatusCanceled:
		out.status, out.msg = o.killed, "canceled while running"
	case o.killed == jobs.StatusTimeout:
		out.status, out.msg = o.killed, fmt.Sprintf("killed at the wall-clock limit of %s", lim.Timeout)
	case oom:
		out.status, out.exit = jobs.StatusOOM, &code
		out.msg = fmt.Sprintf("killed at the memory limit of %s", lim.Memory)
	case o.killed == jobs.StatusOutputLimit || out.stdoutTrunc || out.stderrTrunc:
		out.status = jobs.StatusOutputLimit
		out.msg = fmt.Sprintf("wrote more than the output limit of %s per stream", lim.Output)
	case !signed:
		out.status = jobs.StatusFailed
		out.msg = fmt.Sprintf("%s (the container exited with status %d)", errNoVerdict, o.exitCode)
		if d := strings.TrimSpace(string(o.diag)); d != "" {
			out.msg += ": " + strings.ToValidUTF8(d, "?")
		}
	case code == 0:
		out.status, out.exit = jobs.StatusSucceeded, &code
	default:
		out.status, out.exit = jobs.StatusFailed, &code
		switch {
		case t.Error != "":
			out.msg = t.Error
		case t.Signal != 0:
			out.msg = fmt.Sprintf("killed by signal %d (%s)", t.Signal, syscall.Signal(t.Signal))
		}
	}
	return out
}

func firstNonNil(ps ...*int64) *int64 {
	if i := slices.IndexFunc(ps, func(p *int64) bool { return p != nil }); i >= 0 {
		return ps[i]
	}
	return nil
}

func nanosToMS(p *int64) *int64 {
	if p == nil {
		return nil
	}
	ms := *p / 1e6
	return &ms
}
