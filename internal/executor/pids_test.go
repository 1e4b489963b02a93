package executor

import (
	"testing"

	"github.com/moby/moby/api/types/container"

	"github.com/sandfleet/sandfleet/internal/egressnet"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// The job's pids limit is RLIMIT_NPROC under every runtime; the host's
// pids cgroup is the same number under runc and leaves room for gVisor's
// own tasks under runsc, with or without a network.
func TestContainerSpecPids(t *testing.T) {
	t.Parallel()
	cases := []struct {
		runtime, networkRuntime string
		network                 bool
		pids, host              int64
	}{
		{"runc", "", false, 64, 64},
		{"runc", "", false, 1, 1},
		{"runsc", "runsc-net", false, 64, gVisorBaseTasks + gVisorTasksPerPid*64},
		{"runsc", "runsc-net", true, 32, gVisorBaseTasks + gVisorTasksPerPid*32},
		{"runc", "runsc-net", true, 32, gVisorBaseTasks + gVisorTasksPerPid*32},
		{"runsc", "runc", true, 32, 32},
		{"runscx", "", false, 8, 8}, // not a name deploy/runsc.sh registers
	}
	for _, tc := range cases {
		e, err := newWithAPI(Config{WorkerID: "w", Runtime: tc.runtime, NetworkRuntime: tc.networkRuntime}, &fakeDocker{})
		if err != nil {
			t.Fatal(err)
		}
		l := limits.Default()
		l.Pids = tc.pids
		var att *egressnet.Attachment
		if tc.network {
			att = &egressnet.Attachment{Network: "sandfleet-egress-test"}
		}
		h := e.containerSpec("img", "job-1", l, 123456, att, nil).HostConfig
		if h.PidsLimit == nil || *h.PidsLimit != tc.host {
			t.Errorf("%s (network %v) pids %d: PidsLimit %v, want %d", h.Runtime, tc.network, tc.pids, h.PidsLimit, tc.host)
		}
		if u := ulimit(h.Ulimits, "nproc"); u == nil || u.Soft != tc.pids || u.Hard != tc.pids {
			t.Errorf("%s (network %v) pids %d: nproc %+v, want %d", h.Runtime, tc.network, tc.pids, u, tc.pids)
		}
	}
}

func ulimit(us []*container.Ulimit, name string) *container.Ulimit {
	for _, u := range us {
		if u.Name == name {
			return u
		}
	}
	return nil
}
