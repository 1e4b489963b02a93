package executor

// Attack tests: what a job can learn of the host it runs on, and of the
// launcher beside it, under every runtime.

import (
	"bufio"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// hostIdentityCode prints, as JSON, what the sandbox shows of the host:
// the first bytes of each file (null when refused or absent) and the
// first 500 names under each part of /sys that describes hardware, four
// levels down.
const hostIdentityCode = `import json, os
def read(p):
    try:
        with open(p, "rb") as f:
            return f.read(200).decode("latin-1")
    except OSError:
        return None
def names(top, depth=4):
    found = []
    def walk(d, left):
        try:
            entries = os.listdir(d)
        except OSError:
            return
        for n in entries:
            p = os.path.join(d, n)
            found.append(p)
            if left > 1 and os.path.isdir(p) and not os.path.islink(p):
                walk(p, left - 1)
    walk(top, depth)
    return found[:500]
files = {p: read(p) for p in ["/proc/config.gz", "/proc/kallsyms", "/proc/iomem", "/proc/ioports",
                              "/proc/sys/kernel/random/boot_id"]}
sysfs = {d: names("/sys/" + d) for d in ["bus", "class", "devices", "hypervisor", "power"]}
print(json.dumps({"files": files, "sys": sysfs, "cpus": os.cpu_count()}))
`

type hostIdentity struct {
	Files map[string]*string
	Sys   map[string][]string
	CPUs  int
}

// hostDeviceNames are the names the host's own /sys gives its devices
// (ACPI IDs, PCI addresses, platform devices: the machine's maker), but
// for the numbered CPUs, memory blocks and NUMA nodes, which say nothing
// /proc/cpuinfo and /proc/meminfo do not.
func hostDeviceNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	buses, _ := filepath.Glob("/sys/bus/*/devices")
	for _, b := range buses {
		switch filepath.Base(filepath.Dir(b)) {
		case "cpu", "memory", "node":
			continue
		}
		entries, _ := os.ReadDir(b)
		for _, e := range entries {
			names[e.Name()] = true
		}
	}
	return names
}

// hostCPUs counts the host's CPUs as glibc does without /sys: the cpuN
// lines of /proc/stat.
func hostCPUs(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	cpuN := regexp.MustCompile(`^cpu[0-9]+ `)
	for s := bufio.NewScanner(f); s.Scan(); {
		if cpuN.MatchString(s.Text()) {
			n++
		}
	}
	return n
}

// The kernel's build configuration and symbols, the machine's memory and
// I/O maps, the boot's ID and the names of the host's devices stay out of
// the sandbox: each file reads empty or not at all, two sandboxes show no
// common boot ID, no device of the host is listed, and the job still sees
// the host's CPU count.
func TestIntegrationRedTeamHostIdentity(t *testing.T) {
	t.Parallel()
	hostBoot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	devices := hostDeviceNames(t)
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		var boots []string
		for range 2 {
			res := run(t, e, job(hostIdentityCode))
			want(t, res, jobs.StatusSucceeded)
			var got hostIdentity
			if err := json.Unmarshal([]byte(res.Stdout), &got); err != nil {
				t.Fatalf("%v: %q", err, res.Stdout)
			}
			for _, p := range slices.Sorted(maps.Keys(got.Files)) {
				b := got.Files[p]
				if b == nil || *b == "" {
					continue
				}
				if p == "/proc/sys/kernel/random/boot_id" {
					boots = append(boots, *b)
					if len(hostBoot) > 0 && *b == string(hostBoot) {
						t.Errorf("the sandbox shows the host's boot ID %q", *b)
					}
					continue
				}
				t.Errorf("%s is readable: %d bytes, %.80q", p, len(*b), *b)
			}
			for _, dir := range slices.Sorted(maps.Keys(got.Sys)) {
				names := got.Sys[dir]
				var hosts []string
				for _, p := range names {
					if devices[filepath.Base(p)] {
						hosts = append(hosts, p)
					}
				}
				if len(hosts) > 0 {
					t.Errorf("/sys/%s shows %d of the host's devices: %q", dir, len(hosts), hosts[:min(len(hosts), 5)])
				}
				// Under runc, /sys is the host's: masked, these list
				// nothing. gVisor's sysfs is its own (a CPU list), with
				// none of the host's devices, as the check above holds.
				if e.cfg.Runtime == "runc" && len(names) > 0 {
					t.Errorf("/sys/%s lists %d entries, want none: %q", dir, len(names), names[:min(len(names), 5)])
				}
			}
			if e.cfg.Runtime == "runc" && got.CPUs != hostCPUs(t) {
				t.Errorf("os.cpu_count() = %d in the sandbox, want the host's %d", got.CPUs, hostCPUs(t))
			} else if got.CPUs < 1 {
				t.Errorf("os.cpu_count() = %d", got.CPUs)
			}
		}
		if len(boots) == 2 && boots[0] == boots[1] {
			t.Errorf("two sandboxes show the same boot ID %q: their jobs can be told to share a host", boots[0])
		}
	})
}
