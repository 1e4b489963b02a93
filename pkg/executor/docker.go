package executor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

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
	ImageInspect(ctx context.Context, imageID string, inspectOpts ...client.ImageInspectOption) (client.ImageInspectResult, error)
	Ping(ctx context.Context, options client.PingOptions) (client.PingResult, error)
}

var _ dockerAPI = (*client.Client)(nil)

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
// job that fits them: jobID "" builds one for the warm pool.
func (e *Executor) containerSpec(image, jobID string, l limits.Limits) client.ContainerCreateOptions {
	no := false
	pids := l.Pids
	tmpfs := fmt.Sprintf("rw,nosuid,nodev,size=%d,uid=%d,gid=%d,mode=0755", int64(l.Tmpfs), sandboxUID, sandboxGID)
	network := container.NetworkMode("none")
	if l.Network {
		network = "bridge"
	}
	// The job's files live on the working directory's tmpfs; a file may
	// not outgrow it either (a pipe is not a file, so output is unaffected).
	fsize := int64(l.Tmpfs)
	cfg := &container.Config{
		Image:           image,
		User:            e.cfg.User,
		WorkingDir:      workDir,
		AttachStdin:     true,
		AttachStdout:    true,
		AttachStderr:    true,
		OpenStdin:       true,
		StdinOnce:       true, // EOF on our side closes the job's stdin
		Tty:             false,
		NetworkDisabled: !l.Network,
		Labels: map[string]string{
			LabelManaged:  "true",
			LabelWorker:   e.cfg.WorkerID,
			LabelInstance: e.instance,
		},
	}
	name := "sandfleet-" + jobID + "-" + randHex(4)
	if jobID == "" {
		cfg.Labels[LabelPool] = "true"
		name = "sandfleet-pool-" + randHex(6)
	} else {
		cfg.Labels[LabelJob] = jobID
	}
	host := &container.HostConfig{
		NetworkMode:    network,
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges", "seccomp=" + string(SeccompProfile())},
		Tmpfs: map[string]string{
			"/tmp":  tmpfs,
			workDir: tmpfs,
		},
		// No Init: the launcher is PID 1 (it reaps and forwards signals), so
		// that no process in the sandbox but the job's own is the job's to
		// reach.
		Runtime: e.cfg.Runtime,
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
			},
		},
	}
	return client.ContainerCreateOptions{
		Config:     cfg,
		HostConfig: host,
		Name:       name,
	}
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
}

// DockerRunArgs renders the container configuration of a job of preset
// with the default limits as `docker run` arguments (after "run", without
// the job), from the same containerSpec the executor uses: a baseline for
// benchmarks that cannot drift from the real hardening. The container
// reads its envelope on stdin (-i) and is removed on exit (--rm).
func (e *Executor) DockerRunArgs(preset string) ([]string, error) {
	p, ok := e.cfg.Presets[preset]
	if !ok {
		return nil, fmt.Errorf("executor: unknown preset %q", preset)
	}
	spec := e.containerSpec(p.Image, "docker-run-"+randHex(4), e.cfg.Defaults)
	c, h := spec.Config, spec.HostConfig
	args := []string{"--rm", "-i", "--user", c.User, "--workdir", c.WorkingDir,
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
			path, err := seccompFile()
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
