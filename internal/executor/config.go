package executor

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/pkg/limits"
)

// DefaultImage is the image build.sh builds for the default presets.
const DefaultImage = "sandfleet/sandbox:latest"

// LangsImage is the image `build.sh langs` builds for the languages'
// presets: node, c, cpp, java, go and rust.
const LangsImage = "sandfleet/sandbox-langs:latest"

// DataImage is the image `build.sh data` builds for the "python-data"
// preset: Python with numpy, pandas, matplotlib, scipy, scikit-learn,
// sympy and pillow, whose matplotlib figures come back as the result's
// display outputs.
const DataImage = "sandfleet/sandbox-data:latest"

// Preset is what a job may name in its image field: an image with a main
// file and a command. A job can never name a raw image. Its JSON is a
// preset in the worker's --config file.
type Preset struct {
	Image    string   `json:"image"`     // image reference; it must exist locally, it is never pulled
	MainFile string   `json:"main_file"` // Job.Code is written here, relative to the working directory
	Argv     []string `json:"argv"`      // the command when the job gives none
	// Compile, if set, runs before the command (and before every test
	// case), once: when it fails the job is compile_error and nothing
	// else runs. A job's own compile replaces it.
	Compile []string `json:"compile,omitempty"`
	// Optional presets need not have their image on the worker: Check does
	// not fail for it and the pool skips it, and a job naming the preset
	// is rejected, naming the image and how to build it. The languages'
	// presets are optional, so a Python-only worker needs one image.
	Optional bool `json:"optional,omitempty"`
}

// DefaultPresets returns the presets of a worker configured with none:
// "python" (python3 main.py) and "shell" (bash main.sh) on DefaultImage,
// the optional "python-data" on DataImage, and the optional languages on
// LangsImage, each compiled (where it has a
// compile step) into /tmp, the build's tmpfs, never into the workspace.
func DefaultPresets() map[string]Preset {
	lang := func(main string, compile []string, argv ...string) Preset {
		return Preset{Image: LangsImage, MainFile: main, Compile: compile, Argv: argv, Optional: true}
	}
	return map[string]Preset{
		"python":      {Image: DefaultImage, MainFile: "main.py", Argv: []string{"python3", "main.py"}},
		"python-data": {Image: DataImage, MainFile: "main.py", Argv: []string{"python3", "main.py"}, Optional: true},
		"shell":       {Image: DefaultImage, MainFile: "main.sh", Argv: []string{"bash", "main.sh"}},
		"node":        lang("main.js", nil, "node", "main.js"),
		"c":           lang("main.c", []string{"gcc", "-std=gnu17", "-O2", "-pipe", "-o", "/tmp/main", "main.c", "-lm"}, "/tmp/main"),
		"cpp":         lang("main.cpp", []string{"g++", "-std=gnu++17", "-O2", "-pipe", "-o", "/tmp/main", "main.cpp"}, "/tmp/main"),
		"java":        lang("Main.java", []string{"javac", "-encoding", "UTF-8", "-d", "/tmp/classes", "Main.java"}, "java", "-cp", "/tmp/classes", "Main"),
		"go":          lang("main.go", []string{"sandfleet-go", "build", "-o", "/tmp/main", "main.go"}, "/tmp/main"),
		"rust":        lang("main.rs", []string{"sandfleet-rustc", "-O", "-o", "/tmp/main", "main.rs"}, "/tmp/main"),
	}
}

// Config configures an Executor. Every zero value stands for the documented
// default.
type Config struct {
	// Client talks to the Docker engine. Nil: a client from the environment
	// (DOCKER_HOST, DOCKER_CERT_PATH, ...) that negotiates the API version,
	// closed by Executor.Close.
	Client *client.Client

	// Presets is the allowlist of images a job may name. Nil: DefaultPresets().
	Presets map[string]Preset

	// Defaults are the limits of a job that asks for none; a zero field takes
	// the value of limits.Default().
	Defaults limits.Limits

	// Caps are the most a job may ask for; a zero field takes the value of
	// limits.DefaultCaps(). Caps.Network is what a job may name in its
	// limits.network (nil: no job gets a network), and needs Egress.
	Caps limits.Caps

	// Egress is the worker's egress (internal/egressnet.Networks): a
	// sandbox with a network is attached to an internal network of its
	// own, where the egress proxy is the only thing it reaches, and
	// registered with it before its job starts. Nil: no job may have a network.
	Egress Egress

	// NetworkRuntime is the OCI runtime of sandboxes with a network: ""
	// means Runtime. gVisor registered with --network=none (which Docker's
	// "none" network needs) has no network at all, so a runsc worker names
	// a second registration without it here (deploy/runsc.sh registers
	// runsc-net).
	NetworkRuntime string

	// Runtime is the OCI runtime: "" means "runc"; "runsc" where gVisor is
	// installed.
	Runtime string

	// WorkerID names this worker in the sandfleet.worker label, which Reap
	// uses to find what a crashed predecessor left. "" means the hostname.
	WorkerID string

	// UIDs are the host uids sandboxes run as, one of its own each (and
	// the same number as its gid), never one that another container on the
	// engine holds: see UIDRange. The zero value means DefaultUIDs. Workers
	// sharing an engine may share the range.
	UIDs UIDRange

	// KillGrace is how long a killed sandbox may take to exit before its
	// job ends as an infrastructure failure. 0 means 10s. (Each call to the
	// engine has a deadline of its own: see callDeadlines in docker.go.)
	KillGrace time.Duration

	// Pool is how many warm sandboxes are kept per distinct preset image
	// (the default presets share one image, so Pool in all): started ahead
	// of time with the default limits, the launcher waiting for its
	// envelope, each serving a single job and then removed. A job whose
	// limits differ from Defaults in anything but the timeout (which is
	// the executor's timer, not the container's) gets a fresh container, as
	// do all jobs when the pool is empty. 0: no pool.
	Pool int

	// PoolMax is the most warm sandboxes the pool grows to per image
	// when jobs drain it faster than it refills: a miss doubles its target
	// (a drained pool adds one), and after poolCalm without either it
	// shrinks back towards Pool, one sandbox per sweep. Refills stay at
	// most Pool at a time, so that growing never floods the engine and the
	// CPUs the running jobs need. 0 means Pool: a fixed pool.
	PoolMax int

	// PoolMaxAge retires an idle warm sandbox after this long, so that a
	// rebuilt image or a changed host is picked up. 0 means 10m.
	PoolMaxAge time.Duration

	// Logger receives one line per job and every cleanup failure. Nil:
	// slog.Default().
	Logger *slog.Logger
}

// workDir is the job's working directory, a tmpfs mount.
const workDir = "/workspace"

// resolved returns a copy of c with every default filled in, or an error
// naming the first unusable field.
func (c Config) resolved() (Config, error) {
	if c.Presets == nil {
		c.Presets = DefaultPresets()
	}
	for name, p := range c.Presets {
		if name == "" || p.Image == "" || p.MainFile == "" || len(p.Argv) == 0 || p.Argv[0] == "" {
			return c, fmt.Errorf("executor: Presets[%q]: Image, MainFile and Argv are all required", name)
		}
	}
	c.Defaults = c.Defaults.Fill(limits.Default())
	c.Caps = limits.Caps(limits.Limits(c.Caps).Fill(limits.Limits(limits.DefaultCaps())))
	if err := limits.ValidateCaps(c.Defaults, c.Caps); err != nil {
		return c, fmt.Errorf("executor: Defaults: %w", err)
	}
	if c.Runtime == "" {
		c.Runtime = "runc"
	}
	if c.NetworkRuntime == "" {
		c.NetworkRuntime = c.Runtime
	}
	if c.Caps.Network != nil && c.Egress == nil {
		return c, fmt.Errorf("executor: Caps.Network %s needs Egress, the gateway that enforces it", c.Caps.Network)
	}
	if c.WorkerID == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "worker"
		}
		c.WorkerID = h
	}
	if c.UIDs == (UIDRange{}) {
		c.UIDs = DefaultUIDs
	}
	if err := c.UIDs.validate(); err != nil {
		return c, fmt.Errorf("executor: UIDs: %w", err)
	}
	if c.Pool < 0 {
		return c, fmt.Errorf("executor: Pool %d: want 0 (off) or more", c.Pool)
	}
	switch {
	case c.PoolMax == 0:
		c.PoolMax = c.Pool
	case c.PoolMax < c.Pool:
		return c, fmt.Errorf("executor: PoolMax %d: want at least Pool (%d), or 0", c.PoolMax, c.Pool)
	}
	if c.PoolMaxAge <= 0 {
		c.PoolMaxAge = 10 * time.Minute
	}
	if c.KillGrace <= 0 {
		c.KillGrace = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}
