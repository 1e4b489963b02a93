package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/egressnet"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// dockerAPI is the part of the Docker client the executor uses, small
// enough to fake in unit tests.
type dockerAPI interface {
	ContainerCreate(ctx context.Context, options client.ContainerCreateOptions) (client.ContainerCreateResult, error)
	ContainerAttach(ctx context.Context, containerID string, options client.ContainerAttachOptions) (client.ContainerAttachResult, error)
	ContainerWait(ctx context.Context, containerID string, options client.ContainerWaitOptions) client.ContainerWaitResult
	ContainerStart(ctx context.Context, containerID string, options client.ContainerStartOptions) (client.ContainerStartResult, error)
	ContainerKill(ctx context.Context, containerID string, options client.ContainerKillOptions) (client.ContainerKillResult, error)
	ContainerInspect(ctx context.Context, containerID string, options client.ContainerInspectOptions) (client.ContainerInspectResult, error)
	ContainerRemove(ctx context.Context, containerID string, options client.ContainerRemoveOptions) (client.ContainerRemoveResult, error)
	ContainerList(ctx context.Context, options client.ContainerListOptions) (client.ContainerListResult, error)
	CopyFromContainer(ctx context.Context, containerID string, options client.CopyFromContainerOptions) (client.CopyFromContainerResult, error)
	ImageInspect(ctx context.Context, imageID string, inspectOpts ...client.ImageInspectOption) (client.ImageInspectResult, error)
	Ping(ctx context.Context, options client.PingOptions) (client.PingResult, error)
	Info(ctx context.Context, options client.InfoOptions) (client.SystemInfoResult, error)
}

var _ dockerAPI = (*client.Client)(nil)

// callDeadlines bound the engine's calls, one per kind of call. Every call
// the executor makes goes through withDeadlines, so none can hang the
// worker: a wedged engine (a container stuck inside dockerd, a daemon that
// takes connections and never answers) costs a call its deadline, and the
// call is abandoned then (see within). ContainerWait alone has none: it
// lasts as long as its sandbox, whose job's timeout and KillGrace bound
// how long anyone waits for it, and release ends it.
type callDeadlines struct {
	ping, info, list, image, create, attach, wait, start, inspect, kill, remove, copy time.Duration
}

// deadlines is the one table of the engine's deadlines. Each is several
// times what a loaded host running runsc needs, so that hitting one means
// a wedged engine, not a slow one.
var deadlines = callDeadlines{
	ping:    5 * time.Second,  // answered from the daemon's memory
	info:    10 * time.Second, // the daemon's summary (docker info)
	list:    15 * time.Second, // one pass over the daemon's containers
	image:   10 * time.Second, // a metadata lookup (ImageInspect)
	create:  30 * time.Second, // prepares the container's root filesystem (fuse-overlayfs is slow under load)
	attach:  10 * time.Second, // the handshake only: the stream outlives the call
	wait:    10 * time.Second, // registering the wait: the answer comes at the exit
	start:   30 * time.Second, // the runtime boots the sandbox (runsc takes seconds)
	inspect: 10 * time.Second, // reads the container's state
	kill:    10 * time.Second, // delivers a signal
	remove:  20 * time.Second, // stops what is left, unmounts and deletes the root filesystem
	copy:    10 * time.Second, // a small file out of an image's layers (an image's /etc/passwd)
}

// errNoAnswer is the cause of a call abandoned at its deadline. It is
// context.DeadlineExceeded to errors.Is.
type errNoAnswer struct{ after time.Duration }

func (e errNoAnswer) Error() string {
	return fmt.Sprintf("no answer from the Docker engine within %s", e.after)
}

func (e errNoAnswer) Is(target error) bool { return target == context.DeadlineExceeded }

// within runs call with a deadline of d (or the caller's, if sooner) and
// returns by then even if call does not: the real client gives up once its
// context is done, but a worker must not depend on it. What an abandoned
// call returns later goes to late, which cleans up what nobody else knows
// of (a container, a connection); the goroutine that waits for it is the
// one the executor does not wait for, since it may never end.
func within[T any](ctx context.Context, d time.Duration, call func(context.Context) (T, error), late func(T)) (T, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, d, errNoAnswer{d})
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := call(ctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		defer cancel()
		if r.err != nil && ctx.Err() != nil {
			// The client gave up at the deadline: say which.
			return r.v, fmt.Errorf("%w (%v)", context.Cause(ctx), r.err)
		}
		return r.v, r.err
	case <-ctx.Done():
		err := context.Cause(ctx)
		cancel()
		go func() {
			if r := <-done; r.err == nil && late != nil {
				late(r.v)
			}
		}()
		var zero T
		return zero, err
	}
}

// withDeadlines is the engine with a deadline on every call but
// ContainerWait.
type withDeadlines struct {
	api dockerAPI
	d   callDeadlines
	log *slog.Logger
}

var _ dockerAPI = withDeadlines{}

func (w withDeadlines) ContainerCreate(ctx context.Context, o client.ContainerCreateOptions) (client.ContainerCreateResult, error) {
	return within(ctx, w.d.create, func(ctx context.Context) (client.ContainerCreateResult, error) {
		return w.api.ContainerCreate(ctx, o)
	}, func(r client.ContainerCreateResult) {
		// Made after its caller gave up: nobody else will remove it.
		if _, err := w.ContainerRemove(context.Background(), r.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
			w.log.Error("a container created after its deadline could not be removed; Reap removes it at the next start",
				"container", shortID(r.ID), "error", err)
		}
	})
}

func (w withDeadlines) ContainerAttach(ctx context.Context, id string, o client.ContainerAttachOptions) (client.ContainerAttachResult, error) {
	return within(ctx, w.d.attach, func(ctx context.Context) (client.ContainerAttachResult, error) {
		return w.api.ContainerAttach(ctx, id, o)
	}, func(r client.ContainerAttachResult) { r.HijackedResponse.Close() })
}

// ContainerWait registers the wait within its deadline: the client sends
// the request before it returns, and an engine that never answers it
// would hold the launch, and with it the pool's close, for ever. Past the
// deadline the result carries the error at once, and the request goes on
// until ctx ends (the sandbox's, which its discard cancels).
func (w withDeadlines) ContainerWait(ctx context.Context, id string, o client.ContainerWaitOptions) client.ContainerWaitResult {
	done := make(chan client.ContainerWaitResult, 1)
	go func() { done <- w.api.ContainerWait(ctx, id, o) }()
	t := time.NewTimer(w.d.wait)
	defer t.Stop()
	select {
	case r := <-done:
		return r
	case <-t.C:
		errC := make(chan error, 1)
		errC <- errNoAnswer{w.d.wait}
		return client.ContainerWaitResult{Result: make(chan container.WaitResponse), Error: errC}
	}
}

func (w withDeadlines) ContainerStart(ctx context.Context, id string, o client.ContainerStartOptions) (client.ContainerStartResult, error) {
	return within(ctx, w.d.start, func(ctx context.Context) (client.ContainerStartResult, error) {
		return w.api.ContainerStart(ctx, id, o)
	}, nil)
}

func (w withDeadlines) ContainerKill(ctx context.Context, id string, o client.ContainerKillOptions) (client.ContainerKillResult, error) {
	return within(ctx, w.d.kill, func(ctx context.Context) (client.ContainerKillResult, error) {
		return w.api.ContainerKill(ctx, id, o)
	}, nil)
}

func (w withDeadlines) ContainerInspect(ctx context.Context, id string, o client.ContainerInspectOptions) (client.ContainerInspectResult, error) {
	return within(ctx, w.d.inspect, func(ctx context.Context) (client.ContainerInspectResult, error) {
		return w.api.ContainerInspect(ctx, id, o)
	}, nil)
}

func (w withDeadlines) ContainerRemove(ctx context.Context, id string, o client.ContainerRemoveOptions) (client.ContainerRemoveResult, error) {
	return within(ctx, w.d.remove, func(ctx context.Context) (client.ContainerRemoveResult, error) {
		return w.api.ContainerRemove(ctx, id, o)
	}, nil)
}

func (w withDeadlines) ContainerList(ctx context.Context, o client.ContainerListOptions) (client.ContainerListResult, error) {
	return within(ctx, w.d.list, func(ctx context.Context) (client.ContainerListResult, error) {
		return w.api.ContainerList(ctx, o)
	}, nil)
}

// CopyFromContainer reads the archive within the deadline, up to
// maxCopy: its body is the call's, which ends with it. What it returns
// is in memory.
func (w withDeadlines) CopyFromContainer(ctx context.Context, id string, o client.CopyFromContainerOptions) (client.CopyFromContainerResult, error) {
	return within(ctx, w.d.copy, func(ctx context.Context) (client.CopyFromContainerResult, error) {
		r, err := w.api.CopyFromContainer(ctx, id, o)
		if err != nil {
			return r, err
		}
		defer r.Content.Close()
		data, err := io.ReadAll(io.LimitReader(r.Content, maxCopy))
		r.Content = io.NopCloser(bytes.NewReader(data))
		return r, err
	}, nil)
}

// maxCopy is the most of an archive CopyFromContainer reads: a user table
// (maxUserTable) and its headers.
const maxCopy = maxUserTable + 64<<10

func (w withDeadlines) ImageInspect(ctx context.Context, image string, o ...client.ImageInspectOption) (client.ImageInspectResult, error) {
	return within(ctx, w.d.image, func(ctx context.Context) (client.ImageInspectResult, error) {
		return w.api.ImageInspect(ctx, image, o...)
	}, nil)
}

func (w withDeadlines) Ping(ctx context.Context, o client.PingOptions) (client.PingResult, error) {
	return within(ctx, w.d.ping, func(ctx context.Context) (client.PingResult, error) {
		return w.api.Ping(ctx, o)
	}, nil)
}

func (w withDeadlines) Info(ctx context.Context, o client.InfoOptions) (client.SystemInfoResult, error) {
	return within(ctx, w.d.info, func(ctx context.Context) (client.SystemInfoResult, error) {
		return w.api.Info(ctx, o)
	}, nil)
}

// Labels put on every sandbox container.
const (
	LabelManaged = "sandfleet.managed" // always "true"
	LabelJob     = "sandfleet.job"     // the job's ID; absent on a warm pool's container
	LabelWorker  = "sandfleet.worker"  // Config.WorkerID
	// LabelPool is "true" on a container launched for the warm pool, before
	// any job was known (it may have run one since).
	LabelPool = "sandfleet.pool"
	// LabelInstance names the Executor that made the container, so that Reap
	// spares its own.
	LabelInstance = "sandfleet.instance"
	// LabelUID is the host uid the sandbox runs as, its own while the
	// container exists (its name, sandfleet-uid-<uid>, is the claim).
	LabelUID = "sandfleet.uid"
)

var (
	// ErrInfrastructure is wrapped by every error Run returns: the engine,
	// not the job, failed, so the job should be retried elsewhere or later.
	ErrInfrastructure = errors.New("sandbox infrastructure failure")
	// ErrImageMissing also wraps ErrInfrastructure: a preset's image is not
	// on this host (build it with sandbox-image/build.sh; it is never pulled).
	ErrImageMissing = fmt.Errorf("%w: image missing", ErrInfrastructure)
)

func infraErr(op string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrInfrastructure, op, err)
}

// containerSpec is the one place a sandbox's configuration is built: the
// hardening of docs/design.md "The sandbox container". Nothing in it depends on the
// job beyond its limits and labels, so a pre-started container can take any
// job that fits them: jobID "" builds one for the warm pool. uid is the
// sandbox's own (uidClaims): the job runs as uid:uid, its tmpfs mounts are
// uid's, and the container's name is uid's claim on the engine.
//
// att is the egress gateway's network of a sandbox with a network, nil for
// one without. user is the sandbox's user tables and environment
// (users.go), nil for a container without them (a benchmark's baseline).
func (e *Executor) containerSpec(image, jobID string, l limits.Limits, uid uint32, att *egressnet.Attachment, user *sandboxUser) client.ContainerCreateOptions {
	no := false
	tmpfs := fmt.Sprintf("rw,nosuid,nodev,size=%d,uid=%d,gid=%d,mode=0755", int64(l.Tmpfs), uid, uid)
	// /tmp holds what a compile step builds, which must run: exec there
	// (Docker mounts a tmpfs noexec unless told). The working directory
	// stays noexec: nothing a job is given or keeps runs from it directly.
	// (A job runs code anyway; noexec is tidiness, not a boundary.)
	tmpExec := tmpfs + ",exec"
	// No network, or the sandbox's own internal one, where the egress
	// proxy is all it reaches.
	network := container.NetworkMode("none")
	runtime := e.cfg.Runtime
	if att != nil {
		network = container.NetworkMode(att.Network)
		runtime = e.cfg.NetworkRuntime
	}
	// The job's files live on the working directory's tmpfs; a file may
	// not outgrow it either (a pipe is not a file, so output is unaffected).
	fsize := int64(l.Tmpfs)
	// The job's processes and threads: RLIMIT_NPROC inside, the pids
	// cgroup outside, which under gVisor also holds gVisor's own (pids.go).
	pids := hostPids(runtime, l.Pids)
	cfg := &container.Config{
		Image:           image,
		User:            fmt.Sprintf("%d:%d", uid, uid), // numeric: the engine looks names up in the image's /etc/passwd, not the sandbox's
		WorkingDir:      workDir,
		AttachStdin:     true,
		AttachStdout:    true,
		AttachStderr:    true,
		OpenStdin:       true,
		StdinOnce:       true, // EOF on our side closes the job's stdin
		Tty:             false,
		NetworkDisabled: network == "none",
		Hostname:        Hostname,
		Labels: map[string]string{
			LabelManaged:  "true",
			LabelWorker:   e.cfg.WorkerID,
			LabelInstance: e.instance,
			LabelUID:      strconv.FormatUint(uint64(uid), 10),
		},
	}
	if jobID == "" {
		cfg.Labels[LabelPool] = "true"
	} else {
		cfg.Labels[LabelJob] = jobID
	}
	host := &container.HostConfig{
		NetworkMode:    network,
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges", "seccomp=" + string(seccompProfile(runtime))},
		Tmpfs: map[string]string{
			"/tmp":  tmpExec,
			workDir: tmpfs,
		},
		// No Init: the launcher is PID 1 (it reaps and forwards signals), so
		// that no process in the sandbox but the job's own is the job's to
		// reach.
		Runtime: runtime,
		// A sandbox with a network resolves nothing itself (the proxy
		// does), and Docker's resolver on the internal network cannot
		// forward: give up at once instead of after 10 s of retries.
		DNSOptions: dnsOptions(network),
		// Docker's defaults and what tells a job about the host it has no
		// use for: the host's boot command line, its disks and devices.
		MaskedPaths: maskedPaths,
		// A cgroup namespace of its own: /proc/self/cgroup no longer names
		// the container's full ID and the host's cgroup tree.
		CgroupnsMode: container.CgroupnsModePrivate,
		// /dev/shm is memory like the tmpfs mounts, and sized like them.
		ShmSize: int64(l.Tmpfs),
		// Logs off: the executor reads output through the attach stream,
		// and a flood must not fill the host's disk.
		LogConfig:  container.LogConfig{Type: "none"},
		AutoRemove: false, // removal is ours, after we inspected the state
		Privileged: false,
		IpcMode:    "private",
		Resources: container.Resources{
			Memory:           int64(l.Memory),
			MemorySwap:       int64(l.Memory), // == Memory: no swap
			NanoCPUs:         int64(l.CPUs * 1e9),
			PidsLimit:        &pids,
			OomKillDisable:   &no,
			MemorySwappiness: nil,
			Ulimits: []*container.Ulimit{
				{Name: "nofile", Soft: 1024, Hard: 1024},
				{Name: "fsize", Soft: fsize, Hard: fsize},
				{Name: "core", Soft: 0, Hard: 0},
				{Name: "nproc", Soft: l.Pids, Hard: l.Pids},
				// No POSIX message queues: /dev/mqueue is the private IPC
				// namespace's, but a queue's messages are kernel memory
				// beside the tmpfs mounts, and no workload needs one.
				{Name: "msgqueue", Soft: 0, Hard: 0},
			},
		},
	}
	if att != nil && att.CABundle != "" {
		// The fleet CA the egress proxy intercepts the hosts of the job's
		// secrets with, and the host's roots: read-only, its key elsewhere.
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: att.CABundle,
			Target: egressnet.CABundlePath, ReadOnly: true, BindOptions: &mount.BindOptions{NonRecursive: true}})
	}
	if user != nil {
		// Its own /etc/passwd and /etc/group, naming its uid, read-only.
		cfg.Env = user.env
		host.Mounts = append(host.Mounts, user.mounts()...)
	}
	return client.ContainerCreateOptions{
		Config:     cfg,
		HostConfig: host,
		Name:       uidName(uid),
	}
}

func dnsOptions(network container.NetworkMode) []string {
	if network == "none" {
		return nil
	}
	return []string{"timeout:1", "attempts:1"}
}

// maskedPaths are hidden from the job: Docker's own list (which setting
// MaskedPaths replaces) and what else shows the host.
var maskedPaths = []string{
	// Docker 20.10's defaults.
	"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
	"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
	"/sys/firmware",
	// The host's boot arguments, block devices and hardware.
	"/proc/cmdline", "/proc/partitions", "/proc/diskstats", "/proc/modules",
	"/sys/block", "/sys/class/block", "/sys/dev", "/sys/devices/virtual/dmi",
	"/sys/kernel", "/sys/module",
	// The kernel's build and symbols, and the machine's memory and I/O
	// maps, whose device names say whose machine (a cloud's VM, say).
	"/proc/config.gz", "/proc/kallsyms", "/proc/iomem", "/proc/ioports",
	// The same in every container of a boot: jobs that print it can be
	// told to have shared a host.
	"/proc/sys/kernel/random/boot_id",
	// Every device, bus and class of device the host has, with its
	// vendor's names, and the CPUs' vulnerability and mitigation state.
	// The job's CPU count is sched_getaffinity's and the cgroup's, and
	// glibc falls back to /proc/stat; /sys/fs/cgroup stays.
	"/sys/bus", "/sys/class", "/sys/devices", "/sys/hypervisor", "/sys/power",
}

// DockerRunArgs renders the container configuration of a job of preset
// with the default limits as `docker run` arguments (after "run", without
// the job), from the same containerSpec the executor uses: a baseline for
// benchmarks that cannot drift from the real hardening. The container
// reads its envelope on stdin (-i) and is removed on exit (--rm). It has
// no name and runs as the first uid of Config.UIDs, unclaimed, as every
// container of these arguments does: a benchmark's, not a fleet's; nor
// does it mount a sandbox's user tables (users.go), written per sandbox.
func (e *Executor) DockerRunArgs(preset string) ([]string, error) {
	p, ok := e.cfg.Presets[preset]
	if !ok {
		return nil, fmt.Errorf("executor: unknown preset %q", preset)
	}
	spec := e.containerSpec(p.Image, "docker-run-"+randHex(4), e.cfg.Defaults, e.cfg.UIDs.First, nil, nil)
	c, h := spec.Config, spec.HostConfig
	args := []string{"--rm", "-i", "--user", c.User, "--workdir", c.WorkingDir, "--hostname", c.Hostname,
		"--network", string(h.NetworkMode), "--ipc", string(h.IpcMode), "--runtime", h.Runtime,
		"--log-driver", h.LogConfig.Type}
	if h.ReadonlyRootfs {
		args = append(args, "--read-only")
	}
	for _, cp := range h.CapDrop {
		args = append(args, "--cap-drop", cp)
	}
	for _, o := range h.SecurityOpt {
		if strings.HasPrefix(o, "seccomp=") {
			// docker run takes the profile from a file.
			path, err := seccompFile([]byte(strings.TrimPrefix(o, "seccomp=")))
			if err != nil {
				return nil, fmt.Errorf("executor: seccomp profile: %w", err)
			}
			o = "seccomp=" + path
		}
		args = append(args, "--security-opt", o)
	}
	// docker run has no flag for masked paths: the baseline keeps Docker's
	// default list, a difference that costs nothing at start.
	args = append(args, "--cgroupns", string(h.CgroupnsMode), "--shm-size", fmt.Sprint(h.ShmSize))
	for _, path := range slices.Sorted(maps.Keys(h.Tmpfs)) {
		args = append(args, "--tmpfs", path+":"+h.Tmpfs[path])
	}
	r := h.Resources
	args = append(args, "--memory", fmt.Sprint(r.Memory), "--memory-swap", fmt.Sprint(r.MemorySwap),
		"--cpus", fmt.Sprint(float64(r.NanoCPUs)/1e9))
	if r.PidsLimit != nil {
		args = append(args, "--pids-limit", fmt.Sprint(*r.PidsLimit))
	}
	for _, u := range r.Ulimits {
		args = append(args, "--ulimit", fmt.Sprintf("%s=%d:%d", u.Name, u.Soft, u.Hard))
	}
	for _, k := range slices.Sorted(maps.Keys(c.Labels)) {
		args = append(args, "--label", k+"="+c.Labels[k])
	}
	return append(args, c.Image), nil
}
