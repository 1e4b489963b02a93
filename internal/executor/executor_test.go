package executor

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/egressnet"
	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// fakeDocker stands in for the engine at the dockerAPI boundary. Its one
// container runs behave, which sees the container's stdin and writes its
// stdout and stderr, until it returns an exit code or the container is
// killed.
type fakeDocker struct {
	createErr, attachErr, startErr, waitErr error
	pingErr                                 error  // guarded by mu: the engine is down
	driver                                  string // the storage driver Info reports
	oom                                     bool
	missing                                 map[string]bool // images ImageInspect does not find
	behave                                  func(killed <-chan struct{}, stdin io.Reader, stdout, stderr io.Writer) int64

	mu      sync.Mutex
	calls   []string
	removed int
	kill    chan struct{}
	killed  bool
	stdinR  *io.PipeReader
	outW    *io.PipeWriter
	result  chan container.WaitResponse
}

var _ dockerAPI = (*fakeDocker)(nil)

func (f *fakeDocker) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeDocker) ContainerCreate(ctx context.Context, o client.ContainerCreateOptions) (client.ContainerCreateResult, error) {
	f.record("create")
	if f.createErr != nil {
		return client.ContainerCreateResult{}, f.createErr
	}
	f.kill = make(chan struct{})
	f.result = make(chan container.WaitResponse, 1)
	return client.ContainerCreateResult{ID: "0123456789abcdef"}, nil
}

// pipeConn is the client's end of an attach: writes go to the container's
// stdin, CloseWrite closes it.
type pipeConn struct {
	net.Conn // nil: only the methods below are used
	stdin    *io.PipeWriter
	out      *io.PipeReader
}

func (c *pipeConn) Write(p []byte) (int, error) { return c.stdin.Write(p) }
func (c *pipeConn) CloseWrite() error           { return c.stdin.Close() }
func (c *pipeConn) Close() error {
	c.stdin.CloseWithError(net.ErrClosed)
	return c.out.CloseWithError(net.ErrClosed)
}

func (f *fakeDocker) ContainerAttach(ctx context.Context, id string, o client.ContainerAttachOptions) (client.ContainerAttachResult, error) {
	f.record("attach")
	if f.attachErr != nil {
		return client.ContainerAttachResult{}, f.attachErr
	}
	stdinR, stdinW := io.Pipe()
	outR, outW := io.Pipe()
	f.stdinR, f.outW = stdinR, outW
	conn := &pipeConn{stdin: stdinW, out: outR}
	return client.ContainerAttachResult{HijackedResponse: client.HijackedResponse{Conn: conn, Reader: bufio.NewReader(outR)}}, nil
}

func (f *fakeDocker) ContainerWait(ctx context.Context, id string, o client.ContainerWaitOptions) client.ContainerWaitResult {
	f.record("wait")
	errC := make(chan error, 1)
	if f.waitErr != nil {
		errC <- f.waitErr
	}
	return client.ContainerWaitResult{Result: f.result, Error: errC}
}

func (f *fakeDocker) ContainerStart(ctx context.Context, id string, o client.ContainerStartOptions) (client.ContainerStartResult, error) {
	f.record("start")
	if err := ctx.Err(); err != nil {
		return client.ContainerStartResult{}, err
	}
	if f.startErr != nil {
		return client.ContainerStartResult{}, f.startErr
	}
	go func() {
		code := int64(137)
		exited := make(chan int64, 1)
		go func() {
			exited <- f.behave(f.kill, f.stdinR, muxWriter{f.outW, stdcopy.Stdout}, muxWriter{f.outW, stdcopy.Stderr})
		}()
		select {
		case code = <-exited:
		case <-f.kill:
		}
		f.stdinR.Close()
		f.outW.Close()
		f.result <- container.WaitResponse{StatusCode: code}
	}()
	return client.ContainerStartResult{}, nil
}

func (f *fakeDocker) ContainerKill(ctx context.Context, id string, o client.ContainerKillOptions) (client.ContainerKillResult, error) {
	f.record("kill")
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.killed {
		f.killed = true
		close(f.kill)
	}
	return client.ContainerKillResult{}, nil
}

func (f *fakeDocker) ContainerInspect(ctx context.Context, id string, o client.ContainerInspectOptions) (client.ContainerInspectResult, error) {
	f.record("inspect")
	f.mu.Lock()
	gone := f.removed > 0
	f.mu.Unlock()
	if gone {
		return client.ContainerInspectResult{}, cerrdefs.ErrNotFound
	}
	return client.ContainerInspectResult{Container: container.InspectResponse{State: &container.State{OOMKilled: f.oom}}}, nil
}

func (f *fakeDocker) ContainerRemove(ctx context.Context, id string, o client.ContainerRemoveOptions) (client.ContainerRemoveResult, error) {
	f.record("remove")
	if ctx.Err() != nil {
		return client.ContainerRemoveResult{}, ctx.Err() // a canceled caller's context must not be reused here
	}
	f.mu.Lock()
	f.removed++
	f.mu.Unlock()
	return client.ContainerRemoveResult{}, nil
}

func (f *fakeDocker) ContainerList(ctx context.Context, o client.ContainerListOptions) (client.ContainerListResult, error) {
	return client.ContainerListResult{}, nil
}

func (f *fakeDocker) CopyFromContainer(ctx context.Context, id string, o client.CopyFromContainerOptions) (client.CopyFromContainerResult, error) {
	return client.CopyFromContainerResult{}, cerrdefs.ErrNotFound
}

func (f *fakeDocker) ImageInspect(ctx context.Context, image string, o ...client.ImageInspectOption) (client.ImageInspectResult, error) {
	if f.missing[image] {
		return client.ImageInspectResult{}, cerrdefs.ErrNotFound.WithMessage("no such image: " + image)
	}
	return client.ImageInspectResult{}, nil
}

func (f *fakeDocker) Ping(ctx context.Context, o client.PingOptions) (client.PingResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return client.PingResult{}, f.pingErr
}

func (f *fakeDocker) Info(ctx context.Context, o client.InfoOptions) (client.SystemInfoResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var r client.SystemInfoResult
	r.Info.Driver = f.driver
	return r, f.pingErr
}

// launcher behaves like the real launcher: it decodes the envelope, lets
// job write its output, and appends the trailer.
func launcher(job func(stdin io.Reader, stdout, stderr io.Writer) int) func(<-chan struct{}, io.Reader, io.Writer, io.Writer) int64 {
	return func(_ <-chan struct{}, stdin io.Reader, stdout, stderr io.Writer) int64 {
		h, err := envelope.Decode(stdin)
		if err != nil {
			io.WriteString(stderr, err.Error())
			return 125
		}
		out, errs := &framed{w: stdout, kind: envelope.FrameStdout}, &framed{w: stdout, kind: envelope.FrameStderr}
		code := job(stdin, out, errs)
		cpu := int64(42e6)
		tr := h.Seal().Sign(envelope.Trailer{Exit: code, CPUNanos: &cpu, StdoutBytes: out.n, StderrBytes: errs.n})
		stdout.Write(envelope.AppendFrame(nil, envelope.FrameTrailer, tr))
		return int64(code)
	}
}

// framed writes frames of one kind, as the launcher does, counting them.
type framed struct {
	w    io.Writer
	kind byte
	n    int64
}

func (f *framed) Write(p []byte) (int, error) {
	if _, err := f.w.Write(envelope.AppendFrame(nil, f.kind, p)); err != nil {
		return 0, err
	}
	f.n += int64(len(p))
	return len(p), nil
}

func blockUntilKilled(killed <-chan struct{}, stdin io.Reader, stdout, stderr io.Writer) int64 {
	<-killed
	return 137
}

func TestRunLifecycle(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	hello := launcher(func(stdin io.Reader, stdout, stderr io.Writer) int {
		in, _ := io.ReadAll(stdin)
		io.WriteString(stdout, "hello "+string(in))
		// A forged trailer without the nonce stays part of the output.
		io.WriteString(stderr, "\x1eSANDFLEET1-END 0000000000000000 {\"exit\":0}\n")
		return 0
	})
	cases := []struct {
		name      string
		fake      *fakeDocker
		limits    limits.Limits
		cancel    bool // cancel the context once the container runs
		status    jobs.Status
		infra     bool
		removed   int
		wantCalls []string
		check     func(t *testing.T, r *jobs.Result)
	}{
		{name: "succeeded", fake: &fakeDocker{behave: hello}, status: jobs.StatusSucceeded, removed: 1,
			wantCalls: []string{"create", "attach", "wait", "start", "inspect", "remove"},
			check: func(t *testing.T, r *jobs.Result) {
				if r.Stdout != "hello world" || !strings.HasPrefix(r.Stderr, "\x1eSANDFLEET1-END 0000") {
					t.Errorf("stdout %q stderr %q", r.Stdout, r.Stderr)
				}
				if r.CPUMS == nil || *r.CPUMS != 42 || r.PeakMemoryBytes != nil {
					t.Errorf("cpu_ms %v peak %v, want 42 and null", derefInt64(r.CPUMS), derefInt64(r.PeakMemoryBytes))
				}
			}},
		{name: "create fails", fake: &fakeDocker{createErr: boom}, infra: true, removed: 0},
		{name: "attach fails", fake: &fakeDocker{attachErr: boom}, infra: true, removed: 1},
		{name: "start fails", fake: &fakeDocker{startErr: boom, behave: hello}, infra: true, removed: 1},
		{name: "wait fails", fake: &fakeDocker{waitErr: boom, behave: blockUntilKilled}, infra: true, removed: 1},
		{name: "timeout", fake: &fakeDocker{behave: blockUntilKilled}, limits: limits.Limits{Timeout: limits.Duration(50 * time.Millisecond)},
			status: jobs.StatusTimeout, removed: 1,
			check: func(t *testing.T, r *jobs.Result) {
				if r.Exit != nil || r.CPUMS != nil {
					t.Errorf("a timeout reports exit %v cpu %v, want nulls", derefInt(r.Exit), derefInt64(r.CPUMS))
				}
			}},
		{name: "canceled while running", fake: &fakeDocker{behave: blockUntilKilled}, cancel: true, status: jobs.StatusCanceled, removed: 1},
		{name: "output over the cap", limits: limits.Limits{Output: 1024},
			fake: &fakeDocker{behave: func(killed <-chan struct{}, _ io.Reader, stdout, _ io.Writer) int64 {
				chunk := envelope.AppendFrame(nil, envelope.FrameStdout, []byte(strings.Repeat("x", 100)))
				for {
					select {
					case <-killed:
						return 137
					default:
						stdout.Write(chunk)
					}
				}
			}},
			status: jobs.StatusOutputLimit, removed: 1,
			check: func(t *testing.T, r *jobs.Result) {
				if len(r.Stdout) != 1024 || !r.StdoutTruncated {
					t.Errorf("stdout %d bytes truncated=%v, want 1024 and true", len(r.Stdout), r.StdoutTruncated)
				}
			}},
		{name: "oom from the state", fake: &fakeDocker{oom: true, behave: func(<-chan struct{}, io.Reader, io.Writer, io.Writer) int64 { return 137 }},
			status: jobs.StatusOOM, removed: 1},
		{name: "exit 137 alone is not oom", fake: &fakeDocker{behave: func(<-chan struct{}, io.Reader, io.Writer, io.Writer) int64 { return 137 }},
			status: jobs.StatusFailed, removed: 1,
			check: func(t *testing.T, r *jobs.Result) {
				if r.Exit != nil || r.CPUMS != nil || !strings.Contains(r.Error, errNoVerdict) {
					t.Errorf("exit %v cpu %v error %q, want nulls and no verdict", derefInt(r.Exit), derefInt64(r.CPUMS), r.Error)
				}
			}},
		{name: "exit 0 without a trailer is not success", fake: &fakeDocker{behave: func(_ <-chan struct{}, _ io.Reader, stdout, _ io.Writer) int64 {
			stdout.Write(envelope.AppendFrame(nil, envelope.FrameStdout, []byte("all tests passed\n")))
			return 0
		}},
			status: jobs.StatusFailed, removed: 1,
			check: func(t *testing.T, r *jobs.Result) {
				if r.Exit != nil || !strings.Contains(r.Error, errNoVerdict) || r.Stdout != "all tests passed\n" {
					t.Errorf("exit %v error %q stdout %q", derefInt(r.Exit), r.Error, r.Stdout)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, err := newWithAPI(Config{WorkerID: "w1"}, tc.fake)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				go func() {
					// Poll for the start instead of sleeping a guess.
					for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
						tc.fake.mu.Lock()
						started := len(tc.fake.calls) >= 4
						tc.fake.mu.Unlock()
						if started {
							break
						}
					}
					cancel()
				}()
			}
			j := &jobs.Job{ID: "j1", Image: "python", Code: "print()", Stdin: "world", Limits: tc.limits, Labels: map[string]string{"k": "v"}}
			res, err := e.Run(ctx, j, jobrun.Options{})
			if tc.infra {
				if !errors.Is(err, ErrInfrastructure) || !errors.Is(err, boom) || res != nil {
					t.Fatalf("Run = %v, %v; want nil and an error wrapping ErrInfrastructure and the cause", res, err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if res.Status != tc.status {
					t.Fatalf("status %s, want %s (error %q, stderr %q)", res.Status, tc.status, res.Error, res.Stderr)
				}
				if res.ID != "j1" || res.Labels["k"] != "v" || res.DurationMS == nil || res.FinishedAt == nil {
					t.Errorf("result misses caller fields or timing: %+v", res)
				}
				if tc.check != nil {
					tc.check(t, res)
				}
			}
			if err := e.Close(); err != nil { // waits for the background removal
				t.Fatal(err)
			}
			if tc.fake.removed != tc.removed {
				t.Errorf("removed %d times, want %d (calls %v)", tc.fake.removed, tc.removed, tc.fake.calls)
			}
			if tc.wantCalls != nil && strings.Join(tc.fake.calls, ",") != strings.Join(tc.wantCalls, ",") {
				t.Errorf("calls %v, want %v", tc.fake.calls, tc.wantCalls)
			}
		})
	}
}

func TestRunRejectsWithoutContainer(t *testing.T) {
	t.Parallel()
	f := &fakeDocker{}
	e, err := newWithAPI(Config{}, f)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []*jobs.Job{
		{ID: "a", Image: "nope"},
		{ID: "b", Image: "python", Limits: limits.Limits{Pids: 100000}},
		{ID: "c", Image: "shell", Argv: []string{""}},
	} {
		res, err := e.Run(context.Background(), j, jobrun.Options{})
		if err != nil || res.Status != jobs.StatusRejected || res.Error == "" {
			t.Errorf("job %s: %+v, %v; want rejected with a reason", j.ID, res, err)
		}
	}
	res, _ := e.Run(context.Background(), &jobs.Job{ID: "b", Image: "python", Limits: limits.Limits{Pids: 100000}}, jobrun.Options{})
	if !strings.Contains(res.Error, "limits.pids") || !strings.Contains(res.Error, "1024") {
		t.Errorf("over-cap error %q does not name the field and the cap", res.Error)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err = e.Run(ctx, &jobs.Job{ID: "d", Image: "python"}, jobrun.Options{})
	if err != nil || res.Status != jobs.StatusCanceled {
		t.Errorf("a canceled context: %+v, %v; want canceled", res, err)
	}
	if len(f.calls) != 0 {
		t.Errorf("the engine was called: %v", f.calls)
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	e, err := newWithAPI(Config{Defaults: limits.Limits{Memory: 256 * limits.MiB}}, &fakeDocker{})
	if err != nil {
		t.Fatal(err)
	}
	c := e.cfg
	if c.Runtime != "runc" || c.UIDs != DefaultUIDs || c.WorkerID == "" || c.Logger == nil ||
		c.Defaults.Memory != 256*limits.MiB || c.Defaults.Timeout != limits.Default().Timeout || c.Caps != limits.DefaultCaps() {
		t.Fatalf("defaults not filled: %+v", c)
	}
	for _, bad := range []Config{
		{UIDs: UIDRange{First: 0, Last: 10}}, {UIDs: UIDRange{First: 10, Last: 9}}, {UIDs: UIDRange{First: 1, Last: 1 << 31}},
		{Defaults: limits.Limits{Memory: 64 * limits.GiB}},
		{Presets: map[string]Preset{"x": {Image: "i"}}},
	} {
		if _, err := newWithAPI(bad, &fakeDocker{}); err == nil {
			t.Errorf("config %+v accepted", bad)
		}
	}
}

func TestContainerSpecHardening(t *testing.T) {
	t.Parallel()
	e, _ := newWithAPI(Config{WorkerID: "w", Runtime: "runsc"}, &fakeDocker{})
	l := limits.Default()
	o := e.containerSpec("img", "job-1", l, 123456, nil, nil)
	h := o.HostConfig
	if !h.ReadonlyRootfs || h.NetworkMode != "none" || !o.Config.NetworkDisabled || h.CapDrop[0] != "ALL" ||
		h.SecurityOpt[0] != "no-new-privileges" || h.Memory != h.MemorySwap || h.Memory != int64(l.Memory) ||
		*h.PidsLimit != gVisorPids(64) || h.NanoCPUs != 1e9 || h.Init != nil || h.LogConfig.Type != "none" || h.Runtime != "runsc" ||
		len(h.Binds) != 0 || len(h.Mounts) != 0 || len(h.Devices) != 0 || h.Privileged {
		t.Fatalf("spec not hardened: %+v", h)
	}
	if len(h.SecurityOpt) != 2 || !strings.HasPrefix(h.SecurityOpt[1], "seccomp={") || h.ShmSize != int64(l.Tmpfs) ||
		!slices.Contains(h.MaskedPaths, "/proc/cmdline") || !slices.Contains(h.MaskedPaths, "/proc/kcore") || h.CgroupnsMode != "private" {
		t.Fatalf("seccomp, /dev/shm, masked paths or cgroupns: %+v", h)
	}
	for _, p := range []string{"/proc/config.gz", "/proc/iomem", "/proc/sys/kernel/random/boot_id", "/sys/bus", "/sys/devices"} {
		if !slices.Contains(h.MaskedPaths, p) {
			t.Errorf("%s is not masked", p)
		}
	}
	// The sandbox's own uid runs the job, owns its tmpfs mounts and names
	// the container: the name is the uid's claim on the engine.
	for _, dir := range []string{"/workspace", "/tmp"} {
		if !strings.Contains(h.Tmpfs[dir], ",uid=123456,gid=123456,") {
			t.Fatalf("tmpfs %s: %q, want it owned by 123456", dir, h.Tmpfs[dir])
		}
	}
	if !strings.Contains(h.Tmpfs["/workspace"], "size=67108864") || o.Config.User != "123456:123456" ||
		o.Name != "sandfleet-uid-123456" || o.Config.Labels[LabelUID] != "123456" {
		t.Fatalf("workspace %q, user %q, name %q, labels %v", h.Tmpfs["/workspace"], o.Config.User, o.Name, o.Config.Labels)
	}
	if len(o.Config.Env) != 0 || len(o.Config.Cmd) != 0 {
		t.Fatal("job data leaked into the container's config; it belongs in the envelope")
	}
	// The sandbox's user: its tables read-only over the image's, and the
	// user's environment, nothing of a job's.
	u := &sandboxUser{passwd: "/host/1.passwd", group: "/host/1.group", env: []string{"USER=sandbox"}}
	if o := e.containerSpec("img", "job-1", l, 123456, nil, u); len(o.HostConfig.Mounts) != 2 ||
		!o.HostConfig.Mounts[0].ReadOnly || o.HostConfig.Mounts[0].Target != "/etc/passwd" || o.HostConfig.Mounts[0].Source != u.passwd ||
		!o.HostConfig.Mounts[1].ReadOnly || o.HostConfig.Mounts[1].Target != "/etc/group" || !slices.Equal(o.Config.Env, u.env) {
		t.Fatalf("the user's mounts %+v, env %q", o.HostConfig.Mounts, o.Config.Env)
	}
	l.Network = &limits.Network{Open: true}
	e, _ = newWithAPI(Config{WorkerID: "w", Runtime: "runsc", NetworkRuntime: "runsc-net", Egress: fakeEgress{}}, &fakeDocker{})
	att, _ := e.cfg.Egress.Prepare(context.Background(), l.Network)
	if o := e.containerSpec("img", "job-1", l, 123456, &att, nil); o.HostConfig.NetworkMode != "sandbox-net-1" || o.Config.NetworkDisabled ||
		o.HostConfig.Runtime != "runsc-net" || len(o.Config.Env) != 0 {
		t.Fatalf("a job with a network: network %q, runtime %q, env %v; want its own network, the network runtime, no env in the config",
			o.HostConfig.NetworkMode, o.HostConfig.Runtime, o.Config.Env)
	}
	if o := e.containerSpec("img", "job-1", limits.Default(), 123456, nil, nil); o.HostConfig.NetworkMode != "none" || o.HostConfig.Runtime != "runsc" {
		t.Fatalf("a job without a network: network %q, runtime %q", o.HostConfig.NetworkMode, o.HostConfig.Runtime)
	}
}

// fakeEgress is a gateway whose sandbox networks are "sandbox-net-1" (or
// none, for tests that run real sandboxes without a proxy) and that
// registers nothing.
type fakeEgress struct{ none bool }

var _ Egress = fakeEgress{}

func (f fakeEgress) Prepare(context.Context, *limits.Network) (egressnet.Attachment, error) {
	if f.none {
		return egressnet.Attachment{Network: "none"}, nil
	}
	return egressnet.Attachment{Network: "sandbox-net-1", Env: egressnet.ProxyEnv("http://192.0.2.1:3128")}, nil
}

func (fakeEgress) Admit(context.Context, string, egressnet.Attachment, *limits.Network) error {
	return nil
}

func (fakeEgress) Release(context.Context, string) ([]limits.NetworkUse, error) { return nil, nil }

func (fakeEgress) Update(context.Context, string, egressnet.Attachment, *limits.Network) error {
	return nil
}

func (fakeEgress) Usage(context.Context, string) ([]limits.NetworkUse, error) { return nil, nil }

func (fakeEgress) Drop(context.Context, egressnet.Attachment) error { return nil }

// A worker whose caps grant a network needs a gateway to enforce it.
func TestConfigNetworkNeedsEgress(t *testing.T) {
	t.Parallel()
	caps := limits.DefaultCaps()
	caps.Network = &limits.Network{Open: true}
	if _, err := newWithAPI(Config{Caps: caps}, &fakeDocker{}); err == nil || !strings.Contains(err.Error(), "needs Egress") {
		t.Fatalf("caps with a network and no gateway: %v", err)
	}
	if _, err := newWithAPI(Config{Caps: caps, Egress: fakeEgress{}}, &fakeDocker{}); err != nil {
		t.Fatal(err)
	}
}

func TestCapture(t *testing.T) {
	t.Parallel()
	over := make(chan struct{}, 1)
	c := newCapture(4, over)
	var seen []string
	c.watch(func(kind byte, p []byte) { seen = append(seen, string(kind)+string(p)) })
	w := c.stdoutWriter()
	stream := envelope.AppendFrame(nil, envelope.FrameStdout, []byte("ab"))
	stream = envelope.AppendFrame(stream, envelope.FrameStderr, []byte("xyzw"))
	stream = envelope.AppendFrame(stream, envelope.FrameStdout, []byte("cd"))
	for i := range stream { // a byte at a time: frames arrive in pieces
		w.Write(stream[i : i+1])
	}
	if len(over) != 0 || string(c.stdout.buf) != "abcd" || string(c.stderr.buf) != "xyzw" {
		t.Fatalf("exactly at the cap is not over it: stdout %q stderr %q over %d", c.stdout.buf, c.stderr.buf, len(over))
	}
	w.Write(envelope.AppendFrame(nil, envelope.FrameStdout, []byte("efgh")))
	if len(over) != 1 || string(c.stdout.buf) != "abcd" || c.stdout.n != 8 {
		t.Fatalf("buf %q n %d signals %d", c.stdout.buf, c.stdout.n, len(over))
	}
	if strings.Join(seen, ",") != "oab,exyzw,ocd,oefgh" {
		t.Fatalf("watched %q", seen)
	}
	select {
	case <-c.ended:
		t.Fatal("ended before the trailer")
	default:
	}
	w.Write(envelope.AppendFrame(nil, envelope.FrameTrailer, []byte("t")))
	<-c.ended
	c.stderrWriter().Write([]byte(strings.Repeat("d", 2*maxDiagBytes)))
	if string(c.trailer) != "t" || len(c.diag) != maxDiagBytes {
		t.Fatalf("trailer %q diag %d bytes", c.trailer, len(c.diag))
	}

	broken := newCapture(4, over)
	broken.stdoutWriter().Write([]byte("raw bytes, not frames"))
	<-broken.ended
	if broken.frameErr() == nil {
		t.Fatal("raw bytes did not break the framing")
	}
}

// muxWriter frames writes as the engine does on a non-TTY attach stream,
// one frame per Write so that frames of the two streams never interleave.
type muxWriter struct {
	w   io.Writer
	typ stdcopy.StdType
}

func (m muxWriter) Write(p []byte) (int, error) {
	frame := make([]byte, 8, 8+len(p))
	frame[0] = byte(m.typ)
	binary.BigEndian.PutUint32(frame[4:], uint32(len(p)))
	if _, err := m.w.Write(append(frame, p...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func derefInt64(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestStorageDriver(t *testing.T) {
	t.Parallel()
	e, _ := newWithAPI(Config{WorkerID: "w"}, &fakeDocker{driver: "fuse-overlayfs"})
	if d, err := e.StorageDriver(context.Background()); err != nil || d != "fuse-overlayfs" {
		t.Errorf("StorageDriver = %q, %v; want fuse-overlayfs", d, err)
	}
	down, _ := newWithAPI(Config{WorkerID: "w"}, &fakeDocker{pingErr: errors.New("connection refused")})
	if _, err := down.StorageDriver(context.Background()); !errors.Is(err, ErrInfrastructure) {
		t.Errorf("StorageDriver of an engine that is down: %v, want ErrInfrastructure", err)
	}
}
