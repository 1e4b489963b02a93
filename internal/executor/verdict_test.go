package executor

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

func TestVerdict(t *testing.T) {
	t.Parallel()
	seal := envelope.NewSeal()
	lim := limits.Default()
	lim.Output = 1024
	one := int64(1)
	// streams is what the executor observes of a launcher that framed out
	// and errs, then a trailer signed with s counting them.
	streams := func(s envelope.Seal, out, errs string, tr envelope.Trailer) observed {
		tr.StdoutBytes, tr.StderrBytes = int64(len(out)), int64(len(errs))
		keep := func(b string) []byte { return []byte(b[:min(len(b), int(lim.Output))]) }
		return observed{stdout: keep(out), stderr: keep(errs), stdoutN: int64(len(out)), stderrN: int64(len(errs)), trailer: s.Sign(tr)}
	}
	signed := func(out, errs string, tr envelope.Trailer) observed { return streams(seal, out, errs, tr) }
	with := func(o observed, f func(*observed)) observed { f(&o); return o }
	forger := envelope.NewSeal()

	cases := []struct {
		name    string
		obs     observed
		status  jobs.Status
		exit    int // -1: null
		stdout  string
		msgHas  string
		trunc   bool
		figures bool
	}{
		{name: "signed exit 0", obs: signed("hi\n", "", envelope.Trailer{Exit: 0, CPUNanos: &one}), status: jobs.StatusSucceeded, exit: 0, stdout: "hi\n", figures: true},
		{name: "signed exit 3", obs: signed("", "boom\n", envelope.Trailer{Exit: 3}), status: jobs.StatusFailed, exit: 3},
		{name: "signal", obs: signed("", "", envelope.Trailer{Exit: 137, Signal: 9}), status: jobs.StatusFailed, exit: 137, msgHas: "killed by signal 9"},
		{name: "launcher error", obs: signed("", "x\n", envelope.Trailer{Exit: 127, Error: "nope: command not found"}), status: jobs.StatusFailed, exit: 127, msgHas: "command not found"},
		{name: "no trailer, container exit 0", obs: observed{stdout: []byte("all tests passed\n"), stdoutN: 17}, status: jobs.StatusFailed, exit: -1, stdout: "all tests passed\n", msgHas: errNoVerdict},
		{name: "trailer signed with another key", obs: streams(forger, "ok\n", "", envelope.Trailer{Exit: 0}), status: jobs.StatusFailed, exit: -1, msgHas: errNoVerdict},
		{name: "framing broken", obs: with(signed("", "", envelope.Trailer{Exit: 0}), func(o *observed) {
			o.framesBroken = errors.New("unknown frame kind")
		}), status: jobs.StatusFailed, exit: -1, msgHas: errNoVerdict},
		{name: "bytes it did not count", obs: with(signed("", "", envelope.Trailer{Exit: 0}), func(o *observed) {
			o.stderr, o.stderrN = []byte("injected"), 8
		}), status: jobs.StatusFailed, exit: -1, msgHas: errNoVerdict},
		{name: "no trailer, launcher said why", obs: observed{diag: []byte("sandfleet launcher: envelope: bad\n")}, status: jobs.StatusFailed, exit: -1, msgHas: "envelope: bad"},
		{name: "timeout beats a signed exit 0", obs: with(signed("", "", envelope.Trailer{Exit: 0}), func(o *observed) { o.killed = jobs.StatusTimeout }), status: jobs.StatusTimeout, exit: -1},
		{name: "canceled", obs: observed{killed: jobs.StatusCanceled}, status: jobs.StatusCanceled, exit: -1},
		{name: "oom from the engine", obs: observed{engineOOM: true, exitCode: 137}, status: jobs.StatusOOM, exit: 137},
		{name: "oom from the cgroup", obs: signed("", "", envelope.Trailer{Exit: 137, Signal: 9, CgroupOOMKills: &one}), status: jobs.StatusOOM, exit: 137},
		{name: "over the cap, signed", obs: signed(strings.Repeat("x", 1030), "", envelope.Trailer{Exit: 0}), status: jobs.StatusOutputLimit, exit: -1, stdout: strings.Repeat("x", 1024), trunc: true},
		{name: "killed at the cap", obs: observed{killed: jobs.StatusOutputLimit, stdout: []byte(strings.Repeat("y", 1024)), stdoutN: 5000}, status: jobs.StatusOutputLimit, exit: -1, stdout: strings.Repeat("y", 1024), trunc: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := verdict(tc.obs, seal, lim)
			if out.status != tc.status {
				t.Fatalf("status %s (%s), want %s", out.status, out.msg, tc.status)
			}
			switch {
			case tc.exit < 0 && out.exit != nil:
				t.Errorf("exit %d, want null", *out.exit)
			case tc.exit >= 0 && (out.exit == nil || *out.exit != tc.exit):
				t.Errorf("exit %v, want %d", derefInt(out.exit), tc.exit)
			}
			if tc.stdout != "" && string(out.stdout) != tc.stdout {
				t.Errorf("stdout %q, want %q", out.stdout, tc.stdout)
			}
			if !strings.Contains(out.msg, tc.msgHas) {
				t.Errorf("message %q, want it to contain %q", out.msg, tc.msgHas)
			}
			if out.stdoutTrunc != tc.trunc {
				t.Errorf("stdout truncated = %v, want %v", out.stdoutTrunc, tc.trunc)
			}
			if (out.cpuMS != nil) != tc.figures {
				t.Errorf("cpu figure %v, want present = %v", out.cpuMS, tc.figures)
			}
		})
	}
}
