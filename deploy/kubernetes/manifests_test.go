package kubernetes

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// manifests are the objects an overlay renders to, decoded strictly.
type manifests struct {
	namespaces []*corev1.Namespace
	configMaps map[string]*corev1.ConfigMap
	services   map[string]*corev1.Service
	sets       map[string]*appsv1.StatefulSet
	daemons    map[string]*appsv1.DaemonSet
	budgets    []*policyv1.PodDisruptionBudget
}

// overlays are the two ways to deploy the fleet: with the node's engine or
// with an engine in each worker pod.
var overlays = []string{"node-engine", "engine-sidecar"}

// load renders the overlay (see render) and decodes every object into its
// Kubernetes API type with sigs.k8s.io/yaml's strict mode: an unknown
// field, a misspelt one or a duplicate key is an error, as it would be for
// kubectl apply --validate=strict. A kind the test does not know fails it
// too.
func load(t *testing.T, overlay string) *manifests {
	t.Helper()
	m := &manifests{configMaps: map[string]*corev1.ConfigMap{}, services: map[string]*corev1.Service{},
		sets: map[string]*appsv1.StatefulSet{}, daemons: map[string]*appsv1.DaemonSet{}}
	objs, err := render(overlay)
	if err != nil {
		t.Fatalf("render %s: %v", overlay, err)
	}
	for _, o := range objs {
		strict := func(into any) {
			t.Helper()
			if err := o.decode(into); err != nil {
				t.Fatal(err)
			}
		}
		switch o.meta.APIVersion + " " + o.meta.Kind {
		case "v1 Namespace":
			var v corev1.Namespace
			strict(&v)
			m.namespaces = append(m.namespaces, &v)
		case "v1 ConfigMap":
			var v corev1.ConfigMap
			strict(&v)
			m.configMaps[v.Name] = &v
		case "v1 Service":
			var v corev1.Service
			strict(&v)
			m.services[v.Name] = &v
		case "apps/v1 StatefulSet":
			var v appsv1.StatefulSet
			strict(&v)
			m.sets[v.Name] = &v
		case "apps/v1 DaemonSet":
			var v appsv1.DaemonSet
			strict(&v)
			m.daemons[v.Name] = &v
		case "policy/v1 PodDisruptionBudget":
			var v policyv1.PodDisruptionBudget
			strict(&v)
			m.budgets = append(m.budgets, &v)
		case "v1 Secret":
			t.Fatalf("%s: a Secret is committed; passwords are made at deploy time (docs/operations.md)", o.source)
		default:
			t.Fatalf("%s: kind %s %s is not one this test checks", o.source, o.meta.APIVersion, o.meta.Kind)
		}
	}
	return m
}

func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.Lines(doc) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// A manifest with a field Kubernetes does not know is refused, not ignored.
func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	t.Parallel()
	doc := "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  terminationGracePeriod: 30\n"
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict([]byte(doc), &ds); err == nil {
		t.Fatal("a misspelt field decoded")
	}
}

// flag returns the value of --name=value (or --name value) in args.
func flag(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

func mountOf(c corev1.Container, path string) (corev1.VolumeMount, bool) {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return m, true
		}
	}
	return corev1.VolumeMount{}, false
}

func volume(spec corev1.PodSpec, name string) (corev1.Volume, bool) {
	for _, v := range spec.Volumes {
		if v.Name == name {
			return v, true
		}
	}
	return corev1.Volume{}, false
}

// selects fails t unless selector matches the pod template's labels.
func selects(t *testing.T, what string, sel *metav1.LabelSelector, podLabels map[string]string) {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() || !s.Matches(labels.Set(podLabels)) {
		t.Errorf("%s: selector %v does not select the pods %v (%v)", what, sel, podLabels, err)
	}
}

// noLiteralPasswords fails t if a container's environment holds a password
// as a value instead of a reference to the Secret.
func noLiteralPasswords(t *testing.T, c corev1.Container) {
	t.Helper()
	for _, e := range c.Env {
		if strings.Contains(e.Name, "PASSWORD") && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
			t.Errorf("%s: %s is not from a Secret", c.Name, e.Name)
		}
		if strings.Contains(e.Value, "@") && !regexp.MustCompile(`://\w+:\$\([A-Z_]+\)@`).MatchString(e.Value) {
			t.Errorf("%s: %s=%q holds user info that is not a $(VAR) reference", c.Name, e.Name, e.Value)
		}
	}
}

// The worker is a DaemonSet that drives a Docker engine (the node's or
// its own, by overlay), drains on SIGTERM within a grace period longer
// than the longest job, is ready only on /readyz, exports /metrics and
// reads its NATS password from the Secret.
func TestWorkerDaemonSet(t *testing.T) {
	t.Parallel()
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			t.Parallel()
			m := load(t, overlay)
			ds := m.daemons["worker"]
			if ds == nil {
				t.Fatal("no DaemonSet worker")
			}
			selects(t, "DaemonSet worker", ds.Spec.Selector, ds.Spec.Template.Labels)
			checkWorker(t, ds.Spec.Template.Spec)
			switch overlay {
			case "node-engine":
				checkNodeEngine(t, ds.Spec.Template.Spec)
			case "engine-sidecar":
				checkEngineSidecar(t, ds.Spec.Template.Spec)
			}
		})
	}
}

// checkNodeEngine: the worker drives the node's dockerd through its socket.
func checkNodeEngine(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	c := container(t, spec, "worker")
	sock, ok := mountOf(c, "/var/run/docker.sock")
	v, vok := volume(spec, sock.Name)
	if !ok || !vok || v.HostPath == nil || v.HostPath.Path != "/var/run/docker.sock" ||
		v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathSocket {
		t.Errorf("the host's Docker socket is not mounted at /var/run/docker.sock: %+v %+v", sock, v)
	}
	if len(spec.InitContainers) != 0 || len(spec.Containers) != 1 {
		t.Errorf("node-engine: want the worker alone in its pod, have %d init containers and %d containers", len(spec.InitContainers), len(spec.Containers))
	}
}

// checkWorker checks what both overlays share: the worker container.
func checkWorker(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	c := container(t, spec, "worker")
	if _, ok := mountOf(c, "/var/run/docker.sock"); ok && len(spec.InitContainers) > 0 {
		t.Error("the worker mounts a node's socket beside its own engine")
	}
	tmp, ok := mountOf(c, "/tmp")
	if v, vok := volume(spec, tmp.Name); !ok || !vok || v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("/tmp is not an in-memory emptyDir: %+v", v)
	}
	// What the sandboxes mount (their user tables, the CA bundle) is
	// written under TMPDIR, and the engine reads it at that path: the
	// node's directory for the node's dockerd, the same volume at the
	// same path for the pod's own engine.
	tmpdir := ""
	for _, e := range c.Env {
		if e.Name == "TMPDIR" {
			tmpdir = e.Value
		}
	}
	shared, ok := mountOf(c, tmpdir)
	v, vok := volume(spec, shared.Name)
	switch {
	case tmpdir == "" || !ok || !vok:
		t.Errorf("TMPDIR %q is not a volume of the pod", tmpdir)
	case len(spec.InitContainers) == 0:
		if v.HostPath == nil || v.HostPath.Path != tmpdir {
			t.Errorf("TMPDIR %q is not the node's directory of the same path: %+v", tmpdir, v)
		}
	default:
		e := initContainer(t, spec, "engine")
		if m, ok := mountOf(e, tmpdir); !ok || m.Name != shared.Name || v.HostPath != nil {
			t.Errorf("TMPDIR %q is not the engine's at the same path, on a volume of the pod alone: %+v %+v", tmpdir, m, v)
		}
	}
	for _, f := range []string{"slots", "sessions"} {
		if v, ok := flag(c.Args, f); !ok || v == "" {
			t.Errorf("--%s is not written in: a pod's capacity is --slots jobs and --sessions sessions", f)
		}
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("worker resources %+v: want a memory request and limit", c.Resources)
	}

	grace, ok := flag(c.Args, "grace")
	g, err := time.ParseDuration(grace)
	if !ok || err != nil {
		t.Fatalf("--grace %q: %v (a drain needs one the pod's grace period covers)", grace, err)
	}
	longest := 10 * time.Minute // --max-timeout's default
	if v, ok := flag(c.Args, "max-timeout"); ok {
		if longest, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	tgp := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	if g < longest || tgp <= g {
		t.Errorf("terminationGracePeriodSeconds %s, --grace %s, longest job %s: want longest ≤ grace < the pod's grace period", tgp, g, longest)
	}

	addr, ok := flag(c.Args, "metrics")
	_, port, _ := strings.Cut(addr, ":")
	var metricsPort *corev1.ContainerPort
	for i, p := range c.Ports {
		if p.Name == "metrics" {
			metricsPort = &c.Ports[i]
		}
	}
	if !ok || metricsPort == nil || port != "9090" || metricsPort.ContainerPort != 9090 {
		t.Errorf("--metrics %q and the metrics port %+v disagree", addr, metricsPort)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != "metrics" {
		t.Errorf("readiness probe %+v, want GET /readyz on the metrics port", p)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v, want GET /healthz", p)
	}
	if r, ok := flag(c.Args, "replicas"); !ok || r != "3" {
		t.Errorf("--replicas %q, want 3 for the 3-node cluster", r)
	}
	if id, _ := flag(c.Args, "id"); id != "$(NODE_NAME)" {
		t.Errorf("--id %q, want the node's name", id)
	}
	if c.ImagePullPolicy == corev1.PullAlways {
		t.Error("imagePullPolicy Always: the images are built locally, with no registry")
	}
	sc := c.SecurityContext
	if sc == nil || (sc.Privileged != nil && *sc.Privileged) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("security context %+v: want unprivileged, no escalation, a read-only root", sc)
	}
	noLiteralPasswords(t, c)
	var url string
	for _, e := range c.Env {
		if e.Name == "NATS_URL" {
			url = e.Value
		}
	}
	if !strings.Contains(url, "nats://worker:$(SANDFLEET_WORKER_PASSWORD)@nats.sandfleet.svc:4222") {
		t.Errorf("NATS_URL %q, want the worker user on the nats Service", url)
	}
}

// NATS is a 3-replica StatefulSet with a volume each, nats.conf from the
// ConfigMap (the same file as deploy/compose's), passwords from the
// Secret, routes to all three nodes, and a Service for submitters.
func TestNATSStatefulSet(t *testing.T) { // not parallel: t.Setenv
	for _, overlay := range overlays {
		checkNATS(t, load(t, overlay))
	}
}

func checkNATS(t *testing.T, m *manifests) {
	ss := m.sets["nats"]
	if ss == nil {
		t.Fatal("no StatefulSet nats")
	}
	if ss.Spec.Replicas == nil || *ss.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", ss.Spec.Replicas)
	}
	selects(t, "StatefulSet nats", ss.Spec.Selector, ss.Spec.Template.Labels)
	spec := ss.Spec.Template.Spec
	c := container(t, spec, "nats")

	headless := m.services[ss.Spec.ServiceName]
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("serviceName %q: want a headless Service that publishes nodes before they are ready", ss.Spec.ServiceName)
	} else if !labels.SelectorFromSet(headless.Spec.Selector).Matches(labels.Set(ss.Spec.Template.Labels)) {
		t.Errorf("Service %s does not select the NATS pods", headless.Name)
	}
	routes, _ := flag(c.Args, "routes")
	for i := range 3 {
		want := "@nats-" + string(rune('0'+i)) + "." + ss.Spec.ServiceName + "."
		if !strings.Contains(routes, want) {
			t.Errorf("--routes %q lacks node %d (%s)", routes, i, want)
		}
	}
	for _, pw := range regexp.MustCompile(`://route:([^@]*)@`).FindAllStringSubmatch(routes, -1) {
		if pw[1] != "$(NATS_ROUTE_PASSWORD)" {
			t.Errorf("--routes %q: the route password must be $(NATS_ROUTE_PASSWORD), from the Secret", routes)
		}
	}
	fromSecret := false
	for _, e := range c.EnvFrom {
		fromSecret = fromSecret || (e.SecretRef != nil && e.SecretRef.Name == "sandfleet-nats")
	}
	if !fromSecret {
		t.Error("the NATS container does not take its passwords from the Secret sandfleet-nats")
	}
	noLiteralPasswords(t, c)

	conf, _ := flag(c.Args, "c")
	if conf == "" && len(c.Args) > 1 && c.Args[0] == "-c" {
		conf = c.Args[1]
	}
	mnt, ok := mountOf(c, filepath.Dir(conf))
	v, vok := volume(spec, mnt.Name)
	if !ok || !vok || v.ConfigMap == nil || m.configMaps[v.ConfigMap.Name] == nil {
		t.Fatalf("%s is not mounted from a ConfigMap of these manifests", conf)
	}
	cm := m.configMaps[v.ConfigMap.Name]
	compose, err := os.ReadFile("../compose/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data[filepath.Base(conf)] != string(compose) {
		t.Errorf("ConfigMap %s differs from deploy/compose/nats.conf: run deploy/kubernetes/nats-config.sh", cm.Name)
	}
	// The server parses it, with the Secret's variables set.
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte(cm.Data["nats.conf"]), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"NATS_SERVER_NAME", "NATS_ROUTE_PASSWORD", "SANDFLEET_SUBMITTER_PASSWORD", "SANDFLEET_WORKER_PASSWORD"} {
		t.Setenv(k, "x"+strings.ToLower(strings.ReplaceAll(k, "_", "")))
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats.conf of the ConfigMap: %v", err)
	}
	data, ok := mountOf(c, opts.StoreDir)
	if !ok || !slices.ContainsFunc(ss.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == data.Name }) {
		t.Errorf("the JetStream store %s is not on a volume claim of the StatefulSet", opts.StoreDir)
	}
	for _, p := range []struct {
		name string
		port int
	}{{"client", opts.Port}, {"cluster", opts.Cluster.Port}} {
		if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == p.name && int(cp.ContainerPort) == p.port }) {
			t.Errorf("container port %s is not nats.conf's %d", p.name, p.port)
		}
	}

	svc := m.services["nats"]
	if svc == nil || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(ss.Spec.Template.Labels)) ||
		!slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == 4222 }) {
		t.Errorf("no Service nats on 4222 for submitters and workers: %+v", svc)
	}
	pdb := false
	for _, b := range m.budgets {
		if s, err := metav1.LabelSelectorAsSelector(b.Spec.Selector); err == nil && s.Matches(labels.Set(ss.Spec.Template.Labels)) &&
			b.Spec.MaxUnavailable != nil && b.Spec.MaxUnavailable.IntValue() == 1 {
			pdb = true
		}
	}
	if !pdb {
		t.Error("no PodDisruptionBudget keeping two of three NATS nodes (the JetStream quorum)")
	}
}

// Everything lives in the namespace the manifests create.
func TestNamespace(t *testing.T) {
	t.Parallel()
	for _, overlay := range overlays {
		checkNamespace(t, load(t, overlay))
	}
}

func checkNamespace(t *testing.T, m *manifests) {
	if len(m.namespaces) != 1 {
		t.Fatalf("%d namespaces, want 1", len(m.namespaces))
	}
	ns := m.namespaces[0].Name
	var objs []metav1.ObjectMeta
	for _, o := range m.configMaps {
		objs = append(objs, o.ObjectMeta)
	}
	for _, o := range m.services {
		objs = append(objs, o.ObjectMeta)
	}
	for _, o := range m.sets {
		objs = append(objs, o.ObjectMeta)
	}
	for _, o := range m.daemons {
		objs = append(objs, o.ObjectMeta)
	}
	for _, o := range m.budgets {
		objs = append(objs, o.ObjectMeta)
	}
	for _, o := range objs {
		if o.Namespace != ns {
			t.Errorf("%s is in namespace %q, want %q", o.Name, o.Namespace, ns)
		}
	}
}
