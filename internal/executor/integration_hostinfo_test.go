package executor

// Attack tests: what a job can learn of the host it runs on, and of the
// launcher beside it, under every runtime.

import (
	"bufio"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

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

// launcherProcCode reads what the job can of the launcher's /proc files,
// as PID 1 and as each of its threads, and prints it as JSON: a file's
// bytes or the errno that refused it, a directory's names or its errno,
// and where each descriptor the launcher holds leads.
const launcherProcCode = `import json, os
def read(p):
    try:
        with open(p, "rb") as f:
            return {"data": f.read(1 << 16).decode("latin-1")}
    except OSError as err:
        return {"errno": err.errno}
def ls(p):
    try:
        return {"names": sorted(os.listdir(p))}
    except OSError as err:
        return {"errno": err.errno}
out = {"files": {}, "dirs": {}, "links": {}}
tids = ls("/proc/1/task").get("names", [])
bases = ["/proc/1"] + ["/proc/1/task/" + t for t in tids] + ["/proc/" + t for t in tids if t != "1"]
for base in bases:
    for f in ["environ", "maps", "smaps", "auxv", "status", "cmdline", "mem"]:
        out["files"][base + "/" + f] = read(base + "/" + f)
    d = ls(base + "/fd")
    out["dirs"][base + "/fd"] = d
    for n in d.get("names", []):
        try:
            out["links"][base + "/fd/" + n] = os.readlink(base + "/fd/" + n)
        except OSError as err:
            out["links"][base + "/fd/" + n] = "errno %d" % err.errno
print(json.dumps(out))
`

type procFile struct {
	Data  *string
	Errno int
}

type launcherProc struct {
	Files map[string]procFile
	Dirs  map[string]struct {
		Names []string
		Errno int
	}
	Links map[string]string
}

// The launcher's /proc files (PID 1's and its threads') hold nothing the
// job may not know. Under runc the kernel refuses them: the launcher is
// not dumpable, so they are root's. gVisor gives a non-dumpable task's
// files to root too, but its modes let anyone read environ, maps, smaps
// and auxv and list fd, and it ignores the runtime spec's masked paths;
// a mount over /proc/1's files would still leave each thread's
// /proc/TID. So under runsc the test proves instead that what shows is
// not secret: the environment is the image's and the sandbox user's
// (fixed when the container was created, before any job was known, the
// same in every sandbox of the image; the envelope's key and the
// job's environment never enter it), the descriptors are the container's
// streams, pipes and the poller's, never a file to reopen, and nothing
// read holds the job's secret or a key-shaped value. The memory stays
// refused under both.
func TestIntegrationRedTeamLauncherProcFiles(t *testing.T) {
	t.Parallel()
	secret := "s3cret-" + randHex(12)
	keyShaped := regexp.MustCompile(`[0-9a-f]{64}`)
	streams := regexp.MustCompile(`^(pipe|host|anon_inode):|^/dev/null$`)
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		img, err := e.cfg.Client.ImageInspect(ctx, e.cfg.Presets["python"].Image)
		if err != nil {
			t.Fatal(err)
		}
		imageEnv := map[string]bool{}
		for _, kv := range img.Config.Env {
			imageEnv[kv] = true
		}
		for _, kv := range userEnv(img.Config.Env) { // the sandbox user's, the same in every sandbox
			imageEnv[kv] = true
		}
		res := run(t, e, job(launcherProcCode, func(j *jobs.Job) { j.Env = map[string]string{"JOB_SECRET": secret} }))
		want(t, res, jobs.StatusSucceeded)
		var got launcherProc
		if err := json.Unmarshal([]byte(res.Stdout), &got); err != nil {
			t.Fatalf("%v: %.300q", err, res.Stdout)
		}
		if len(got.Files) < 7 {
			t.Fatalf("read %d files of the launcher, want PID 1's and its threads'", len(got.Files))
		}
		runc := e.cfg.Runtime == "runc"
		refused := map[string]bool{"environ": true, "maps": true, "smaps": true, "auxv": true, "mem": true}
		readable := 0
		for _, p := range slices.Sorted(maps.Keys(got.Files)) {
			f := got.Files[p]
			name := filepath.Base(p)
			if f.Data == nil {
				continue
			}
			readable++
			if name == "mem" || runc && refused[name] {
				t.Errorf("%s: read %d bytes, want EACCES", p, len(*f.Data))
				continue
			}
			if strings.Contains(*f.Data, secret) || keyShaped.MatchString(*f.Data) {
				t.Errorf("%s holds the job's secret or a key: %.200q", p, *f.Data)
			}
			if name == "environ" {
				for kv := range strings.SplitSeq(strings.TrimRight(*f.Data, "\x00"), "\x00") {
					if !imageEnv[kv] && !strings.HasPrefix(kv, "HOSTNAME=") && !strings.HasPrefix(kv, "HOME=") {
						t.Errorf("%s: %q is not the image's environment", p, kv)
					}
				}
			}
		}
		for _, p := range slices.Sorted(maps.Keys(got.Dirs)) {
			if d := got.Dirs[p]; runc && d.Errno != 13 {
				t.Errorf("%s: listed %q (errno %d), want EACCES", p, d.Names, d.Errno)
			}
		}
		for _, p := range slices.Sorted(maps.Keys(got.Links)) {
			if l := got.Links[p]; !streams.MatchString(l) {
				t.Errorf("%s leads to %q: a file the job could reopen", p, l)
			}
		}
		t.Logf("%s: %d of %d files readable, %d descriptors listed", e.cfg.Runtime, readable, len(got.Files), len(got.Links))
	})
}
