package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

func TestIntegrationOutputFlood(t *testing.T) {
	// Not parallel: it measures this process's heap.
	e := setup(t, nil)
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	// 1 GB in 1 MiB writes; sys.stdout.buffer bypasses Python's line handling.
	res := run(t, e, job("import sys\nb = b'x' * (1 << 20)\nfor _ in range(1024): sys.stdout.buffer.write(b)\nprint('finished', file=sys.stderr)"))
	close(stop)
	wg.Wait()
	want(t, res, jobs.StatusOutputLimit)
	if len(res.Stdout) != int(limits.Default().Output) || !res.StdoutTruncated || strings.Trim(res.Stdout, "x") != "" {
		t.Fatalf("stdout: %d bytes (truncated=%v), want exactly the %d-byte cap of x", len(res.Stdout), res.StdoutTruncated, limits.Default().Output)
	}
	if strings.Contains(res.Stderr, "finished") {
		t.Fatal("the flood ran to completion: it was not killed at the cap")
	}
	growth := int64(peak) - int64(base.HeapInuse)
	t.Logf("heap in use: %d MiB before, %d MiB at the peak", base.HeapInuse>>20, peak>>20)
	if growth > 64<<20 {
		t.Fatalf("the executor's heap grew by %d MiB for a 1 GB flood", growth>>20)
	}
}

func TestIntegrationNoNetwork(t *testing.T) {
	t.Parallel()
	code := `import os, socket
print("ifaces", sorted(name for _, name in socket.if_nameindex()))  # /sys/class is masked
try:
    socket.create_connection(("1.1.1.1", 53), timeout=3)
    print("connect ok")
except OSError as err:
    print("connect failed", type(err).__name__)
try:
    socket.getaddrinfo("example.com", 80)
    print("dns ok")
except OSError as err:
    print("dns failed", type(err).__name__)
`
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		res := run(t, e, job(code))
		want(t, res, jobs.StatusSucceeded)
		for _, s := range []string{"ifaces ['lo']", "connect failed", "dns failed"} {
			if !strings.Contains(res.Stdout, s) {
				t.Errorf("stdout %q lacks %q", res.Stdout, s)
			}
		}
	})
}

func TestIntegrationFilesystem(t *testing.T) {
	t.Parallel()
	code := `import os
for path in ["/x", "/usr/x", "/etc/passwd", "/usr/local/bin/sandfleet-launcher"]:
    try:
        open(path, "a").write("x")
        print("wrote", path)
    except OSError as err:
        print("denied", path, err.errno)
open("/workspace/ok", "w").write("ok")
print("workspace ok")
n = 0
chunk = b"x" * (1 << 20)
try:
    with open("/tmp/fill", "wb") as f:
        for _ in range(200):
            f.write(chunk)
            f.flush()
            n += 1
except OSError as err:
    print("tmp stopped", n, err.errno)
`
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		res := run(t, e, job(code, withLimits(limits.Limits{Tmpfs: 16 * limits.MiB})))
		want(t, res, jobs.StatusSucceeded)
		if strings.Contains(res.Stdout, "wrote") || strings.Count(res.Stdout, "denied") != 4 || !strings.Contains(res.Stdout, "workspace ok") {
			t.Fatalf("read-only root not enforced: %q", res.Stdout)
		}
		var n, errno int
		i := strings.Index(res.Stdout, "tmp stopped")
		if i < 0 {
			t.Fatalf("200 MB to /tmp did not stop: %q", res.Stdout)
		}
		if _, err := fmt.Sscanf(res.Stdout[i:], "tmp stopped %d %d", &n, &errno); err != nil || n > 16 {
			t.Fatalf("/tmp took %d MiB, over its 16 MiB size (%q)", n, res.Stdout[i:])
		}
		// ENOSPC from the tmpfs, or EFBIG from the fsize ulimit set to the same size.
		if errno != 28 && errno != 27 {
			t.Fatalf("/tmp stopped with errno %d, want ENOSPC or EFBIG", errno)
		}
	})
}

func TestIntegrationPrivileges(t *testing.T) {
	t.Parallel()
	code := `import ctypes, os, subprocess
st = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
print("uid", os.getuid(), os.geteuid())
print("gid", os.getgid(), os.getegid(), "groups", os.getgroups())
print("capeff", st["CapEff"].strip(), "capprm", st["CapPrm"].strip(), "nnp", st.get("NoNewPrivs", "absent").strip())
print("seccomp", st.get("Seccomp", "absent").strip())
for s in ["/var/run/docker.sock", "/run/docker.sock"]:
    print("sock", s, os.path.exists(s))
r = subprocess.run(["mount", "-t", "tmpfs", "none", "/tmp"], capture_output=True)
print("mount rc", r.returncode)
libc = ctypes.CDLL(None, use_errno=True)
for name, flag in [("user", 0x10000000), ("mnt", 0x00020000), ("net", 0x40000000)]:
    print("unshare", name, libc.unshare(flag))
`
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		res := run(t, e, job(code))
		want(t, res, jobs.StatusSucceeded)
		nnp := "nnp 1"
		if e.cfg.Runtime == "runsc" {
			nnp = "nnp absent" // gVisor's /proc/self/status has no such line
		}
		// A uid of its own from the range, its gid the same, no other group.
		var uid, euid, gid, egid, group int
		if _, err := fmt.Sscanf(res.Stdout, "uid %d %d\ngid %d %d groups [%d]\n", &uid, &euid, &gid, &egid, &group); err != nil ||
			uid != euid || gid != uid || egid != uid || group != uid || uid < int(DefaultUIDs.First) || uid > int(DefaultUIDs.Last) {
			t.Errorf("ids: want one uid of %s as uid, gid and only group:\n%s", DefaultUIDs, res.Stdout)
		}
		for _, s := range []string{"capeff 0000000000000000 capprm 0000000000000000 " + nnp,
			"seccomp 2", "sock /var/run/docker.sock False", "sock /run/docker.sock False",
			"unshare user -1", "unshare mnt -1", "unshare net -1"} {
			if !strings.Contains(res.Stdout, s) {
				t.Errorf("stdout lacks %q:\n%s", s, res.Stdout)
			}
		}
		if strings.Contains(res.Stdout, "mount rc 0") {
			t.Errorf("mount succeeded:\n%s", res.Stdout)
		}
	})
}

func TestIntegrationPayloadIntegrity(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return string(b)
	}
	files := map[string]string{}
	for i := range 50 {
		files[fmt.Sprintf("data/d%d/f%02d.bin", i%5, i)] = random(1 + rng.IntN(20000))
	}
	stdin := random(300000) + "\x00\r\n\xff"
	// 1 MiB of code: a program followed by a long comment.
	prog := `import hashlib, os, sys
for root, _, names in sorted(os.walk(".")):
    for n in sorted(names):
        p = os.path.join(root, n)[2:]
        print(p, hashlib.sha256(open(p, "rb").read()).hexdigest())
print("<stdin>", hashlib.sha256(sys.stdin.buffer.read()).hexdigest())
`
	code := prog + "#" + strings.Repeat("y", (1<<20)-len(prog)-2) + "\n"
	forEachRuntime(t, func(t *testing.T, e *Executor) {
		files := maps.Clone(files) // each runtime's run adds main.py below
		res := run(t, e, job(code, func(j *jobs.Job) { j.Files, j.Stdin = files, stdin }))
		want(t, res, jobs.StatusSucceeded)
		sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
		var wantLines []string
		files["main.py"] = code
		for n, data := range files {
			wantLines = append(wantLines, n+" "+sum(data))
		}
		sort.Strings(wantLines)
		wantLines = append(wantLines, "<stdin> "+sum(stdin))
		got := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		sort.Strings(got[:len(got)-1])
		if strings.Join(got, "\n") != strings.Join(wantLines, "\n") {
			t.Fatalf("payload differs:\ngot  %v\nwant %v", got, wantLines)
		}
	})
}

// TestIntegrationInspectAndCancel inspects a running sandbox, then cancels
// its job through the context.
func TestIntegrationInspectAndCancel(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	cli := e.cfg.Client
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type ran struct {
		res *jobs.Result
		err error
	}
	got := make(chan ran, 1)
	go func() {
		res, err := e.Run(ctx, job("import time\nprint('up', flush=True)\ntime.sleep(120)",
			withLimits(limits.Limits{Timeout: limits.Duration(60 * time.Second), Memory: 128 * limits.MiB, CPUs: 0.5, Pids: 40})), jobrun.Options{})
		got <- ran{res, err}
	}()
	var id string
	err := testutil.Poll(ctx, 30*time.Second, 50*time.Millisecond, func(ctx context.Context) error {
		list, err := cli.ContainerList(ctx, client.ContainerListOptions{
			Filters: make(client.Filters).Add("label", LabelWorker+"="+e.cfg.WorkerID).Add("status", "running"),
		})
		if err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return errors.New("no running sandbox")
		}
		id = list.Items[0].ID
		return nil
	})
	if err != nil {
		t.Fatalf("no running sandbox within 30s: %v", err)
	}
	info, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, h := info.Container.Config, info.Container.HostConfig
	checks := []struct {
		what string
		ok   bool
	}{
		{"ReadonlyRootfs", h.ReadonlyRootfs},
		{"NetworkMode none", h.NetworkMode == "none"},
		{"CapDrop ALL", len(h.CapDrop) == 1 && h.CapDrop[0] == "ALL"},
		{"no CapAdd", len(h.CapAdd) == 0},
		{"no-new-privileges", strings.Contains(strings.Join(h.SecurityOpt, ","), "no-new-privileges")},
		{"not privileged", !h.Privileged},
		{"Memory == MemorySwap == 128m", h.Memory == 128<<20 && h.MemorySwap == h.Memory},
		{"PidsLimit 40", h.PidsLimit != nil && *h.PidsLimit == 40},
		{"NanoCPUs 0.5", h.NanoCPUs == 5e8},
		{"non-root user", c.User != "" && c.User != "0" && !strings.HasPrefix(c.User, "root") && !strings.HasPrefix(c.User, "0:")},
		{"no Init: the launcher is PID 1", h.Init == nil || !*h.Init},
		{"seccomp profile of our own", slices.ContainsFunc(h.SecurityOpt, func(o string) bool { return strings.HasPrefix(o, "seccomp=") })},
		{"log driver none", h.LogConfig.Type == "none"},
		{"no log file", info.Container.LogPath == ""},
		{"no binds or mounts but the user tables, read-only", len(h.Binds) == 0 && userTablesOnly(h.Mounts)},
		{"no devices", len(h.Devices) == 0},
		{"tmpfs /tmp and /workspace", strings.Contains(h.Tmpfs["/tmp"], "nosuid") && strings.Contains(h.Tmpfs["/workspace"], "nodev")},
		{"labels", c.Labels[LabelManaged] == "true" && c.Labels[LabelWorker] == e.cfg.WorkerID && c.Labels[LabelJob] != ""},
		{"runtime runc", h.Runtime == "runc"},
	}
	for _, ch := range checks {
		if !ch.ok {
			t.Errorf("docker inspect: %s does not hold", ch.what)
		}
	}
	for _, m := range info.Container.Mounts {
		if strings.Contains(m.Source, "docker.sock") {
			t.Errorf("the Docker socket is mounted: %+v", m)
		}
	}
	cancel()
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	want(t, r.res, jobs.StatusCanceled)
}

func TestIntegrationRejected(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	cases := []struct {
		name string
		job  *jobs.Job
		want []string
	}{
		{"unknown preset", job("x", func(j *jobs.Job) { j.Image = "ubuntu:latest" }), []string{"unknown preset", "ubuntu:latest", "python-data, rust, shell"}},
		{"memory over cap", job("x", withLimits(limits.Limits{Memory: 64 * limits.GiB})), []string{"limits.memory", "64g", "4g"}},
		{"network not allowed", job("x", withLimits(limits.Limits{Network: &limits.Network{Open: true}})), []string{"limits.network", "not allowed"}},
		{"bad file name", job("x", func(j *jobs.Job) { j.Files = map[string]string{"../escape": ""} }), []string{"../escape"}},
		{"main file collision", job("x", func(j *jobs.Job) { j.Files = map[string]string{"main.py": "y"} }), []string{"main.py"}},
	}
	for _, tc := range cases {
		res := run(t, e, tc.job)
		want(t, res, jobs.StatusRejected)
		for _, s := range tc.want {
			if !strings.Contains(res.Error, s) {
				t.Errorf("%s: error %q lacks %q", tc.name, res.Error, s)
			}
		}
		if res.StartedAt != nil {
			t.Errorf("%s: a rejected job has a start time", tc.name)
		}
	}
}

func TestIntegrationReap(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	// What a crashed worker leaves: a created and a running sandbox.
	for i := range 2 {
		c, err := e.api.ContainerCreate(ctx, claimedSpec(t, e, fmt.Sprintf("orphan-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if _, err := e.api.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Another worker's sandbox must survive.
	other := setup(t, nil)
	c, err := other.api.ContainerCreate(ctx, claimedSpec(t, other, "not-mine"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.api.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
	// The worker restarts: a new Executor with the same WorkerID. (e's own
	// containers are spared by e.Reap: they carry e's instance label.)
	if n, err := e.Reap(ctx); err != nil || n != 0 {
		t.Fatalf("Reap by the executor that made them = %d, %v; want 0", n, err)
	}
	restarted, err := New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	n, err := restarted.Reap(ctx)
	if err != nil || n != 2 {
		t.Fatalf("Reap = %d, %v; want 2", n, err)
	}
	if left := listOf(t, other.cfg.Client, other.cfg.WorkerID); len(left) != 1 {
		t.Fatalf("the other worker's sandboxes: %v, want its one", left)
	}
}

func TestIntegrationCheck(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	if err := e.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	missing := setup(t, func(c *Config) {
		c.Presets = map[string]Preset{"ghost": {Image: "sandfleet/no-such-image:never", MainFile: "m", Argv: []string{"m"}}}
	})
	err := missing.Check(context.Background())
	if !errors.Is(err, ErrImageMissing) || !errors.Is(err, ErrInfrastructure) {
		t.Fatalf("Check with a missing image = %v, want ErrImageMissing", err)
	}
	_, err = missing.Run(context.Background(), job("x", func(j *jobs.Job) { j.Image = "ghost" }), jobrun.Options{})
	if !errors.Is(err, ErrImageMissing) {
		t.Fatalf("Run with a missing image = %v, want ErrImageMissing", err)
	}
}

// userTablesOnly reports whether mounts are the sandbox's /etc/passwd and
// /etc/group (users.go), read-only binds, and nothing else.
func userTablesOnly(mounts []mount.Mount) bool {
	if len(mounts) != 2 {
		return false
	}
	seen := map[string]bool{}
	for _, m := range mounts {
		if m.Type != mount.TypeBind || !m.ReadOnly {
			return false
		}
		seen[m.Target] = true
	}
	return seen["/etc/passwd"] && seen["/etc/group"]
}
