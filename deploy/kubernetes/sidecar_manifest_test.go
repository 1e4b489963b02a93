package kubernetes

import (
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// env returns the value of the container's variable name.
func env(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// engineSocket is where the pod's engine listens: the engine's
// ENGINE_SOCKET, in a directory the engine and the worker both mount from
// the same emptyDir.
type engineSocket struct {
	path   string // the socket, as both containers see it
	volume string // the emptyDir that carries it
}

// sidecarSocket checks the socket's wiring and returns it.
func sidecarSocket(t *testing.T, spec corev1.PodSpec) engineSocket {
	t.Helper()
	engine, worker := initContainer(t, spec, "engine"), container(t, spec, "worker")
	path, ok := env(engine, "ENGINE_SOCKET")
	if !ok || !filepath.IsAbs(path) {
		t.Fatalf("the engine's ENGINE_SOCKET %q is not an absolute path", path)
	}
	em, ok := mountOf(engine, filepath.Dir(path))
	wm, wok := mountOf(worker, filepath.Dir(path))
	v, vok := volume(spec, em.Name)
	if !ok || !wok || em.Name != wm.Name || !vok || v.EmptyDir == nil {
		t.Fatalf("the socket's directory %s is not one emptyDir mounted in both the engine and the worker: %+v %+v %+v", filepath.Dir(path), em, wm, v)
	}
	if host, _ := env(worker, "DOCKER_HOST"); host != "unix://"+path {
		t.Errorf("the worker's DOCKER_HOST %q, want unix://%s", host, path)
	}
	return engineSocket{path: path, volume: v.Name}
}

func initContainer(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.InitContainers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no init container %s", name)
	return corev1.Container{}
}

// checkEngineSidecar: the pod brings its engine, a native sidecar (an init
// container that keeps running, started before the worker and stopped
// after it), privileged with its own data root, its socket shared with the
// worker only, nothing on the network.
func checkEngineSidecar(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	if len(spec.InitContainers) != 1 {
		t.Fatalf("%d init containers, want the engine alone", len(spec.InitContainers))
	}
	engine := initContainer(t, spec, "engine")
	if engine.RestartPolicy == nil || *engine.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("the engine is not a native sidecar (restartPolicy: Always): the kubelet would stop it beside a draining worker")
	}
	if sc := engine.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Errorf("the engine is not privileged: %+v (dockerd needs it)", sc)
	}
	if len(engine.Ports) != 0 || spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("the engine exposes ports %v or shares the node's namespaces (network %v, pid %v, ipc %v)",
			engine.Ports, spec.HostNetwork, spec.HostPID, spec.HostIPC)
	}
	for _, a := range engine.Args {
		if strings.HasPrefix(a, "tcp://") || strings.Contains(a, "--host=tcp") {
			t.Errorf("the engine listens on TCP: %v", engine.Args)
		}
	}
	if engine.ImagePullPolicy == corev1.PullAlways {
		t.Error("the engine's imagePullPolicy is Always: the images are built locally, with no registry")
	}
	data, ok := mountOf(engine, "/var/lib/docker")
	if v, vok := volume(spec, data.Name); !ok || !vok || v.EmptyDir == nil || v.EmptyDir.Medium == corev1.StorageMediumMemory {
		t.Errorf("/var/lib/docker is not the engine's own emptyDir on disk: %+v", v)
	}
	if p := engine.StartupProbe; p == nil || p.Exec == nil {
		t.Error("no startupProbe: the worker would start before the engine has its images")
	}
	if l := engine.Lifecycle; l == nil || l.PreStop == nil || l.PreStop.Exec == nil {
		t.Error("the engine has no preStop that waits for the worker's containers")
	}
	r := engine.Resources
	if r.Requests.Memory().IsZero() || r.Requests.Cpu().IsZero() || r.Limits.Memory().IsZero() {
		t.Errorf("engine resources %+v: want cpu and memory requests and a memory limit (the sandboxes count there)", r)
	}
	sock := sidecarSocket(t, spec)
	for _, c := range append(spec.Containers, spec.InitContainers...) {
		if m, ok := mountOfVolume(c, sock.volume); ok && c.Name != "engine" && c.Name != "worker" {
			t.Errorf("container %s mounts the engine's socket at %s", c.Name, m.MountPath)
		}
	}
}

func mountOfVolume(c corev1.Container, name string) (corev1.VolumeMount, bool) {
	for _, m := range c.VolumeMounts {
		if m.Name == name {
			return m, true
		}
	}
	return corev1.VolumeMount{}, false
}
