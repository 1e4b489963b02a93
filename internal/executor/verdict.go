package executor

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
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
	compile                  *jobs.CompileReport
	tests                    *jobs.TestReport
	display                  []jobs.Display
	displayDropped           int
}

// archiveVerdict is what the trailer says of the archive, if it checks.
type archiveVerdict struct {
	signed         bool // a signed trailer covers exactly the archive that came
	files, skipped int
	skips          []jobs.SkippedEntry // the first skipped, with the reason
	err            string              // the launcher's reason it is incomplete
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
	c := o.claim(seal)
	code := int(o.exitCode)
	if c.signed {
		code = c.t.Exit
		out.believe(o, c.t)
	}
	oom := o.engineOOM || (c.signed && c.t.CgroupOOMKills != nil && *c.t.CgroupOOMKills > 0)
	out.settle(o, c, code, oom, lim)
	return out
}

// claim is what the launcher's trailer says of the job, and whether it is
// to be believed.
type claim struct {
	t       envelope.Trailer
	signed  bool                  // signed with the job's seal, and what it counts is what came
	reports []envelope.CaseReport // a judged job's case reports, when signed
}

// claim opens the trailer and checks it against what arrived: the
// framing held, and its byte counts and digests (streams, archive,
// compile output, cases, displays) are those of the frames; a judged
// job's case reports decode and a compile step asked for is reported.
func (o observed) claim(seal envelope.Seal) claim {
	t, signed := seal.Open(o.trailer)
	signed = signed && o.framesBroken == nil && t.StdoutBytes == o.stdoutN && t.StderrBytes == o.stderrN &&
		t.ArchiveBytes == o.archiveN && t.ArchiveSHA256 == o.archiveSHA &&
		t.CompileBytes == o.compileN && t.Cases == o.casesN && t.CasesSHA256 == o.casesSHA &&
		t.Displays == o.displaysN && t.DisplaysSHA256 == o.displaysSHA
	var reports []envelope.CaseReport
	if signed && o.judge != nil {
		var ok bool
		reports, ok = decodeCases(o.cases, t.Cases)
		// A compile step asked for and not reported: not this launcher's
		// trailer for this header.
		signed = ok && (!o.judge.compiled || t.CompileExit != nil)
	}
	return claim{t: t, signed: signed, reports: reports}
}

// believe records what a signed trailer reports besides the status: the
// archive (unless the executor killed the job), the displays, the usage
// figures and the compile step.
func (out *outcome) believe(o observed, t envelope.Trailer) {
	if o.killed == "" {
		out.archive = archiveVerdict{signed: true, files: t.ArchiveFiles, skipped: t.ArchiveSkipped, err: t.ArchiveError}
		for _, s := range t.ArchiveSkips {
			out.archive.skips = append(out.archive.skips, jobs.SkippedEntry{Name: s.Name, Reason: s.Reason})
		}
	}
	out.display, out.displayDropped = decodeDisplays(o.displays)
	out.displayDropped += t.DisplaysDropped + t.Displays - len(o.displays)
	out.cpuMS = nanosToMS(firstNonNil(t.CgroupCPUNanos, t.CPUNanos))
	out.peakBytes = firstNonNil(t.CgroupPeakBytes, t.MaxRSSBytes)
	if o.judge != nil && o.judge.compiled && t.CompileExit != nil {
		out.compile = &jobs.CompileReport{
			Exit:            t.CompileExit,
			DurationMS:      t.CompileMS,
			Output:          strings.ToValidUTF8(string(o.compileOut), "\uFFFD"),
			OutputTruncated: t.CompileSeen > t.CompileBytes,
		}
	}
}

// settle gives the job's status, exit and message, in the order of
// verdict's rules: the executor's kills, memory, output, the trailer.
func (out *outcome) settle(o observed, c claim, code int, oom bool, lim limits.Limits) {
	t := c.t
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
	case !c.signed:
		out.status = jobs.StatusFailed
		out.msg = fmt.Sprintf("%s (the container exited with status %d)", errNoVerdict, o.exitCode)
		if d := strings.TrimSpace(string(o.diag)); d != "" {
			out.msg += ": " + strings.ToValidUTF8(d, "?")
		}
	case t.CompileExit != nil && *t.CompileExit != 0:
		out.status, out.exit = jobs.StatusCompileErr, &code
		out.msg = fmt.Sprintf("the compile step exited with status %d", *t.CompileExit)
		if t.Error != "" {
			out.msg = t.Error
		}
	case o.judge != nil && o.judge.tests:
		out.tests = testReport(o.judge.names, c.reports)
		out.exit = &code
		switch {
		case code == 0 && out.tests.Passed == out.tests.Total:
			out.status = jobs.StatusSucceeded
		default:
			out.status = jobs.StatusFailed
			out.msg = testsMessage(out.tests, t.Error)
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

// decodeCases decodes the case reports a signed trailer counted: each must
// be the next case's, in order. ok is false otherwise, which voids the
// verdict (a launcher of another version, or a bug: never the job's doing,
// since the trailer's digest covers exactly these frames).
func decodeCases(frames [][]byte, n int) ([]envelope.CaseReport, bool) {
	if len(frames) != n {
		return nil, false
	}
	reps := make([]envelope.CaseReport, 0, n)
	for i, f := range frames {
		var r envelope.CaseReport
		if json.Unmarshal(f, &r) != nil || r.Index != i || r.Verdict == "" {
			return nil, false
		}
		reps = append(reps, r)
	}
	return reps, true
}

// testReport turns the launcher's reports into the result's, one entry
// per case asked: those without a report did not run.
func testReport(names []string, reps []envelope.CaseReport) *jobs.TestReport {
	tr := &jobs.TestReport{Total: len(names), Cases: make([]jobs.CaseResult, 0, len(names))}
	for i, name := range names {
		c := jobs.CaseResult{Index: i, Name: name, Verdict: jobs.CaseNotRun}
		if i < len(reps) {
			r := reps[i]
			d := r.DurationMS
			c.Verdict, c.Exit, c.Signal, c.DurationMS = r.Verdict, r.Exit, r.Signal, &d
			c.CPUMS, c.PeakMemoryBytes = r.CPUMS, r.MaxRSS
			c.StdoutBytes, c.StderrBytes, c.Stderr, c.Diff, c.Error = r.StdoutN, r.StderrN, r.Stderr, (*jobs.Diff)(r.Diff), r.Error
		}
		switch c.Verdict {
		case jobs.CasePassed:
			tr.Passed++
		case jobs.CaseNotRun:
			tr.NotRun++
		default:
			tr.Failed++
		}
		tr.Cases = append(tr.Cases, c)
	}
	return tr
}

// testsMessage says how a judged job failed.
func testsMessage(tr *jobs.TestReport, launcherErr string) string {
	if launcherErr != "" && tr.Passed+tr.Failed == 0 {
		return launcherErr
	}
	msg := fmt.Sprintf("%d of %d test cases passed", tr.Passed, tr.Total)
	for _, c := range tr.Cases {
		if c.Verdict != jobs.CasePassed && c.Verdict != jobs.CaseNotRun {
			name := ""
			if c.Name != "" {
				name = " " + strconv.Quote(c.Name)
			}
			msg += fmt.Sprintf(" (first failure: case %d%s, %s)", c.Index, name, c.Verdict)
			break
		}
	}
	return msg
}
