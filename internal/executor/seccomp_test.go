package executor

import (
	"encoding/json"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// gVisor's profile differs from runc's in clone3 alone: ENOSYS by a trace
// with no tracer, which gVisor's older releases answer as Linux does,
// where they turn errnoRet into EPERM.
func TestSeccompProfileForGVisor(t *testing.T) {
	t.Parallel()
	clone3 := func(b []byte) (rules []specs.LinuxSyscall, rest []specs.LinuxSyscall) {
		t.Helper()
		var p specs.LinuxSeccomp
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Syscalls {
			if slices.Contains(r.Names, "clone3") && len(r.Names) == 1 {
				rules = append(rules, r)
			} else {
				rest = append(rest, r)
			}
		}
		return rules, rest
	}
	runc, runcRest := clone3(seccompProfile("runc"))
	gv, gvRest := clone3(seccompProfile("runsc-net"))
	if len(runc) != 1 || runc[0].Action != specs.ActErrno || runc[0].ErrnoRet == nil || *runc[0].ErrnoRet != 38 {
		t.Fatalf("runc's clone3 rule: %+v, want ENOSYS", runc)
	}
	if len(gv) != 1 || gv[0].Action != specs.ActTrace {
		t.Fatalf("gVisor's clone3 rule: %+v, want a trace", gv)
	}
	a, _ := json.Marshal(runcRest)
	b, _ := json.Marshal(gvRest)
	if string(a) != string(b) {
		t.Fatal("the profiles differ beyond clone3")
	}
}
