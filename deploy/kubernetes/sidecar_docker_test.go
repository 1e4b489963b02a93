package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"

	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// requireEngineEnv makes a missing engine image a failure: CI's images
// leave it out (its first build takes minutes), so there the test skips.
const requireEngineEnv = "SANDFLEET_REQUIRE_ENGINE"

// docker runs the docker CLI and returns its trimmed output.
func docker(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// pod is the engine-sidecar pod's two containers run with plain Docker,
// as the kubelet would run them: one network namespace (the engine's,
// which the worker joins), the pod's emptyDirs as volumes.
type pod struct {
	t        *testing.T
	name     string // prefix of everything the test creates
	spec     corev1.PodSpec
	volumes  map[string]string // pod volume -> docker volume
	engine   string            // container names
	worker   string
	workerID string
}

// TestEngineSidecarPod runs the engine-sidecar pod's engine and worker as
// the manifest wires them (its volumes, env, args, probes and security
// settings, read from the rendered overlay), against a NATS container:
// a job runs in a sandbox of the pod's engine, not the host's, and a
// worker sent SIGTERM mid-job (the kubelet's stop) finishes the job before
// it exits, after which the engine's preStop returns. Then the node-engine
// overlay's worker runs the same jobs on the host's engine, and the test
// logs both latencies: what the nested engine costs.
func TestEngineSidecarPod(t *testing.T) {
	ds := load(t, "engine-sidecar").daemons["worker"]
	if ds == nil {
		t.Fatal("no DaemonSet worker")
	}
	spec := ds.Spec.Template.Spec
	engineC, workerC := initContainer(t, spec, "engine"), container(t, spec, "worker")
	testutil.NeedDocker(t, func(ctx context.Context) error {
		for _, img := range []string{workerC.Image, "sandfleet/nats:latest"} {
			if _, err := docker(ctx, "image", "inspect", img); err != nil {
				return fmt.Errorf("%s: %w", img, err)
			}
		}
		return nil
	})
	if _, err := docker(t.Context(), "image", "inspect", engineC.Image); err != nil {
		msg := fmt.Sprintf("needs %s (deploy/compose/images.sh engine; not in make images, its first build takes minutes)", engineC.Image)
		if os.Getenv(requireEngineEnv) == "1" {
			t.Fatalf("%s=1: %s", requireEngineEnv, msg)
		}
		t.Skipf("%s (%s=1 makes this a failure)", msg, requireEngineEnv)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	suffix := strconv.FormatInt(time.Now().UnixNano()%1_000_000_000, 36)
	p := &pod{t: t, name: "sf-kube-" + suffix, spec: spec, volumes: map[string]string{}, workerID: "kube-" + suffix}
	net := p.name
	p.must(ctx, "network", "create", net)
	t.Cleanup(func() { _, _ = docker(context.Background(), "network", "rm", net) })

	natsName := p.name + "-nats"
	p.run(ctx, natsName, "--network", net, "-p", "127.0.0.1::4222", "sandfleet/nats:latest", "-js", "-sd", "/tmp/js")
	p.startEngine(ctx, engineC, net)
	natsURL := "nats://" + natsName + ":4222"
	p.worker = p.name + "-worker"
	p.startWorker(ctx, spec, p.worker, p.workerID, "container:"+p.engine, "127.0.0.1", natsURL)

	addr, err := docker(ctx, "port", natsName, "4222/tcp")
	if err != nil {
		t.Fatal(err)
	}
	client := p.client(ctx, "nats://"+strings.Fields(addr)[0])

	// The worker serves the manifest's lanes, not the default queue.
	queue, ok := flag(workerC.Args, "queue")
	if !ok {
		t.Fatal("the worker has no --queue")
	}
	lane, _, _ := strings.Cut(queue, ":")
	jctx, jcancel := context.WithTimeout(ctx, 2*time.Minute)
	res, err := client.SubmitAndWait(jctx, &jobs.Job{Queue: lane, Image: "python", Code: "print(6 * 7)"})
	jcancel()
	if err != nil || res.Status != jobs.StatusSucceeded || res.Stdout != "42\n" {
		p.dump()
		t.Fatalf("job through the pod: %+v, %v", res, err)
	}
	label := "label=sandfleet.worker=" + p.workerID
	if host, _ := docker(ctx, "ps", "-aq", "--filter", label); host != "" {
		t.Errorf("the host's engine holds the worker's sandboxes: %s", host)
	}
	if inner, _ := docker(ctx, "exec", p.engine, "docker", "ps", "-aq", "--filter", label); inner == "" {
		t.Error("the pod's engine holds none of the worker's sandboxes (its warm pool should be there)")
	}
	const timed = 8
	sidecar := jobTimes(ctx, t, client, lane, timed)

	// The kubelet's stop: SIGTERM to the worker mid-job.
	id, err := client.Submit(ctx, &jobs.Job{Queue: lane, Image: "python", Code: "import time\ntime.sleep(3)\nprint('finished')"})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, "the job running in the pod", func() bool {
		var st jobs.WorkerStatus
		out, err := docker(ctx, "exec", p.engine, "curl", "-fsS", "http://127.0.0.1:9090/status")
		return err == nil && json.Unmarshal([]byte(out), &st) == nil && st.Busy > 0
	})
	p.must(ctx, "kill", "--signal", "TERM", p.worker)
	if code, err := docker(ctx, "wait", p.worker); err != nil || code != "0" {
		p.dump()
		t.Errorf("the worker drained with exit code %s, %v; want 0", code, err)
	}
	res, err = client.Get(ctx, id)
	if err != nil || res.Status != jobs.StatusSucceeded || res.Stdout != "finished\n" {
		p.dump()
		t.Fatalf("the job in flight when the pod stopped: %+v, %v; want it finished", res, err)
	}
	// The engine's preStop returns once the worker's containers are gone.
	hook := engineC.Lifecycle.PreStop.Exec.Command
	if _, err := docker(ctx, append([]string{"exec", p.engine}, hook...)...); err != nil {
		t.Errorf("the engine's preStop: %v", err)
	}
	if left, _ := docker(ctx, "exec", p.engine, "docker", "ps", "-aq"); left != "" {
		t.Errorf("containers left in the pod's engine after the drain: %s", left)
	}

	// The same worker as the node-engine overlay runs it, on this host's
	// engine, for the same jobs: what the nested engine costs.
	node := load(t, "node-engine").daemons["worker"]
	nodeID, nodeName := p.workerID+"-node", p.name+"-node-worker"
	t.Cleanup(func() {
		if ids, _ := docker(context.Background(), "ps", "-aq", "--filter", "label=sandfleet.worker="+nodeID); ids != "" {
			_, _ = docker(context.Background(), append([]string{"rm", "-f"}, strings.Fields(ids)...)...)
		}
	})
	p.startWorker(ctx, node.Spec.Template.Spec, nodeName, nodeID, net, nodeName, natsURL)
	host := jobTimes(ctx, t, client, lane, timed)
	t.Logf("%d sequential print() jobs, submit to result: p50 %s (min %s, max %s) in the pod's engine, p50 %s (min %s, max %s) on the host's",
		timed, sidecar[timed/2].Round(time.Millisecond), sidecar[0].Round(time.Millisecond), sidecar[timed-1].Round(time.Millisecond),
		host[timed/2].Round(time.Millisecond), host[0].Round(time.Millisecond), host[timed-1].Round(time.Millisecond))
}

// run starts a container named name, removed when the test ends.
func (p *pod) run(ctx context.Context, name string, args ...string) {
	p.t.Helper()
	p.t.Cleanup(func() { _, _ = docker(context.Background(), "rm", "-f", "-v", name) })
	p.must(ctx, append([]string{"run", "-d", "--name", name}, args...)...)
}

func (p *pod) must(ctx context.Context, args ...string) string {
	p.t.Helper()
	out, err := docker(ctx, args...)
	if err != nil {
		p.t.Fatal(err)
	}
	return out
}

// mounts returns c's volume mounts as docker flags: each pod volume (an
// emptyDir) becomes one docker volume, shared by the containers that
// mount it, as the pod's emptyDir is.
func (p *pod) mounts(ctx context.Context, spec corev1.PodSpec, c corev1.Container) []string {
	p.t.Helper()
	var args []string
	for _, m := range c.VolumeMounts {
		v, ok := volume(spec, m.Name)
		if ok && v.HostPath != nil {
			// node-engine: this host's engine, and the directory it reads
			// the sandboxes' files from.
			args = append(args, "-v", v.HostPath.Path+":"+m.MountPath)
			continue
		}
		if !ok || v.EmptyDir == nil {
			p.t.Fatalf("%s: volume %s is not an emptyDir: the pod would need the node", c.Name, m.Name)
		}
		dv, ok := p.volumes[m.Name]
		if !ok {
			dv = p.name + "-" + m.Name
			p.must(ctx, "volume", "create", dv)
			p.t.Cleanup(func() { _, _ = docker(context.Background(), "volume", "rm", "-f", dv) })
			p.volumes[m.Name] = dv
		}
		args = append(args, "-v", dv+":"+m.MountPath)
	}
	return args
}

// envArgs returns c's environment as docker flags, $(VAR) expanded as
// the kubelet expands it; set replaces what the pod takes from the
// cluster (the node's name, the Secret).
func envArgs(c corev1.Container, set map[string]string) []string {
	vals := map[string]string{}
	var args []string
	for _, e := range c.Env {
		v, ok := set[e.Name]
		if !ok {
			v = expand(e.Value, vals)
		}
		vals[e.Name] = v
		args = append(args, "-e", e.Name+"="+v)
	}
	return args
}

var ref = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

func expand(s string, vals map[string]string) string {
	return ref.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := vals[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// startEngine runs the engine container and waits for its startupProbe.
func (p *pod) startEngine(ctx context.Context, c corev1.Container, net string) {
	p.t.Helper()
	p.engine = p.name + "-engine"
	args := append([]string{"--network", net}, p.privileged(ctx, c.Image)...)
	args = append(args, p.mounts(ctx, p.spec, c)...)
	args = append(args, envArgs(c, nil)...)
	args = append(append(args, c.Image), c.Args...)
	p.run(ctx, p.engine, args...)
	probe := c.StartupProbe.Exec.Command
	if err := testutil.Poll(ctx, 3*time.Minute, time.Second, func(ctx context.Context) error {
		_, err := docker(ctx, append([]string{"exec", p.engine}, probe...)...)
		return err
	}); err != nil {
		p.dump()
		p.t.Fatalf("the engine's startupProbe never passed: %v", err)
	}
}

// privileged returns the flags of securityContext.privileged on this
// host: --privileged where the host's engine can grant it. Where it
// cannot (an engine itself confined, without every capability: this
// machine's lacks CAP_SYS_RESOURCE), the nearest it can grant: every
// capability it holds, no seccomp or AppArmor profile, all devices, and
// the cgroup hierarchy writable, under a parent of the test's own.
func (p *pod) privileged(ctx context.Context, image string) []string {
	p.t.Helper()
	if _, err := docker(ctx, "run", "--rm", "--privileged", "--entrypoint", "/bin/true", image); err == nil {
		return []string{"--privileged"}
	}
	p.t.Log("this host's engine cannot run --privileged containers: running the engine with every capability it can grant")
	p.t.Cleanup(func() { // the parent cgroups, once the engine is gone (removed before: cleanups run last first)
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + p.name)
		for _, d := range dirs {
			_ = os.Remove(d)
		}
	})
	return []string{"--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE", "--security-opt", "seccomp=unconfined",
		"--security-opt", "apparmor=unconfined", "--security-opt", "systempaths=unconfined",
		"--device-cgroup-rule", "a *:* rwm", "--cgroupns", "host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup",
		"-e", "ENGINE_CGROUP_PARENT=/" + p.name}
}

// startWorker runs the worker named name (and --id id) with the
// manifest's args (but one NATS node's replicas), env, mounts and security
// context, in network namespace netns, and waits for its readinessProbe,
// which the engine container (the only one with curl) asks at readyHost.
func (p *pod) startWorker(ctx context.Context, spec corev1.PodSpec, name, id, netns, readyHost, natsURL string) {
	p.t.Helper()
	c := container(p.t, spec, "worker")
	args := []string{"--network", netns}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			args = append(args, "--user", strconv.FormatInt(*sc.RunAsUser, 10))
		}
		if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
			args = append(args, "--read-only")
		}
		if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
			args = append(args, "--security-opt", "no-new-privileges")
		}
		if sc.Capabilities != nil && len(sc.Capabilities.Drop) == 1 && sc.Capabilities.Drop[0] == "ALL" {
			args = append(args, "--cap-drop", "ALL")
		}
	}
	args = append(args, p.mounts(ctx, spec, c)...)
	env := envArgs(c, map[string]string{"NODE_NAME": id, "SANDFLEET_WORKER_PASSWORD": "unused", "NATS_URL": natsURL})
	args = append(append(args, env...), c.Image)
	vals := map[string]string{"NODE_NAME": id}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--replicas=") {
			a = "--replicas=1" // one NATS node here
		}
		args = append(args, expand(a, vals))
	}
	p.run(ctx, name, args...)
	ready := "http://" + readyHost + ":9090" + c.ReadinessProbe.HTTPGet.Path
	if err := testutil.Poll(ctx, 3*time.Minute, time.Second, func(ctx context.Context) error {
		_, err := docker(ctx, "exec", p.engine, "curl", "-fsS", ready)
		return err
	}); err != nil {
		p.dump(name)
		p.t.Fatalf("worker %s never became ready: %v", name, err)
	}
}

// jobTimes runs n jobs one after another on lane and returns their
// durations, submit to result, sorted.
func jobTimes(ctx context.Context, t *testing.T, client *jobs.Client, lane string, n int) []time.Duration {
	t.Helper()
	var ds []time.Duration
	for i := range n {
		start := time.Now()
		res, err := client.SubmitAndWait(ctx, &jobs.Job{Queue: lane, Image: "python", Code: "print(" + strconv.Itoa(i) + ")"})
		if err != nil || res.Status != jobs.StatusSucceeded {
			t.Fatalf("job %d: %+v, %v", i, res, err)
		}
		ds = append(ds, time.Since(start))
	}
	slices.Sort(ds)
	return ds
}

func (p *pod) client(ctx context.Context, url string) *jobs.Client {
	p.t.Helper()
	nc, err := nats.Connect(url, nats.IgnoreDiscoveredServers())
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		p.t.Fatal(err)
	}
	c, err := jobs.NewClient(ctx, js, jobs.Config{})
	if err != nil {
		p.t.Fatal(err)
	}
	return c
}

// dump logs the pod's containers' logs, and those of more.
func (p *pod) dump(more ...string) {
	for _, c := range append([]string{p.engine, p.worker}, more...) {
		if c == "" {
			continue
		}
		out, _ := exec.Command("docker", "logs", "--tail", "40", c).CombinedOutput()
		p.t.Logf("%s:\n%s", c, out)
	}
}
