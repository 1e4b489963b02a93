package kubernetes

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"
)

// The manifests are a kustomize base and two overlays. The test renders
// them itself with the part of kustomize they use, resources (files and
// directories) and strategic-merge patches matched by kind, name and
// namespace, applied with apimachinery's strategicpatch, which is what
// kustomize applies them with too: kustomize's own module would bring
// tens of modules for these few lines. A field of a kustomization that
// this renderer does not know fails the test, so the manifests cannot
// come to rely on kustomize features the test does not apply.

// kustomization is the subset of kustomize.config.k8s.io/v1beta1 used here.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Patches    []struct {
		Path string `json:"path"`
	} `json:"patches"`
}

// object is one rendered document: where it came from, and its JSON.
type object struct {
	source string
	meta   metav1.TypeMeta
	name   string
	ns     string
	json   []byte
}

// kinds maps the kinds the manifests may hold to their API types, for the
// strategic merge (its list merge keys come from the types' tags).
var kinds = map[string]func() any{
	"v1 Namespace":                  func() any { return &corev1.Namespace{} },
	"v1 ConfigMap":                  func() any { return &corev1.ConfigMap{} },
	"v1 Service":                    func() any { return &corev1.Service{} },
	"v1 Secret":                     func() any { return &corev1.Secret{} },
	"apps/v1 StatefulSet":           func() any { return &appsv1.StatefulSet{} },
	"apps/v1 DaemonSet":             func() any { return &appsv1.DaemonSet{} },
	"apps/v1 Deployment":            func() any { return &appsv1.Deployment{} },
	"policy/v1 PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
}

// render returns the objects of the kustomization in dir, in order.
func render(dir string) ([]object, error) {
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		return nil, fmt.Errorf("%s/kustomization.yaml: %w", dir, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		return nil, fmt.Errorf("%s/kustomization.yaml: %s %s, want kustomize.config.k8s.io/v1beta1 Kustomization", dir, k.APIVersion, k.Kind)
	}
	var objs []object
	for _, r := range k.Resources {
		path := filepath.Join(dir, r)
		fi, err := os.Stat(path)
		if err != nil {
			return nil, err
		}
		var more []object
		if fi.IsDir() {
			more, err = render(path)
		} else {
			more, err = documents(path)
		}
		if err != nil {
			return nil, err
		}
		objs = append(objs, more...)
	}
	for _, p := range k.Patches {
		patches, err := documents(filepath.Join(dir, p.Path))
		if err != nil {
			return nil, err
		}
		for _, patch := range patches {
			if err := apply(objs, patch); err != nil {
				return nil, err
			}
		}
	}
	return objs, nil
}

// apply merges patch into the one object of objs of its kind, name and
// namespace.
func apply(objs []object, patch object) error {
	key := patch.meta.APIVersion + " " + patch.meta.Kind
	for i, o := range objs {
		if o.meta != patch.meta || o.name != patch.name || o.ns != patch.ns {
			continue
		}
		merged, err := strategicpatch.StrategicMergePatch(o.json, patch.json, kinds[key]())
		if err != nil {
			return fmt.Errorf("%s: %w", patch.source, err)
		}
		objs[i].json = merged
		objs[i].source = o.source + " + " + patch.source
		return nil
	}
	return fmt.Errorf("%s: the patch's target %s %s/%s is not among the resources", patch.source, key, patch.ns, patch.name)
}

// documents splits a YAML file into its objects. Each is strictly decoded
// into its API type: a misspelt field of a patch fails here, not later as
// an unknown field of the merged object with the patch's name lost.
func documents(path string) ([]object, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var objs []object
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		o := object{source: fmt.Sprintf("%s #%d", path, i)}
		var head struct {
			metav1.TypeMeta
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			return nil, fmt.Errorf("%s: %w", o.source, err)
		}
		o.meta, o.name, o.ns = head.TypeMeta, head.Metadata.Name, head.Metadata.Namespace
		newObj, ok := kinds[o.meta.APIVersion+" "+o.meta.Kind]
		if !ok {
			return nil, fmt.Errorf("%s: kind %s %s is not one this test checks", o.source, o.meta.APIVersion, o.meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), newObj()); err != nil {
			return nil, fmt.Errorf("%s (%s): %w", o.source, o.meta.Kind, err)
		}
		if o.json, err = yaml.YAMLToJSON([]byte(doc)); err != nil {
			return nil, fmt.Errorf("%s: %w", o.source, err)
		}
		objs = append(objs, o)
	}
	return objs, nil
}

// decode decodes o strictly into its API type.
func (o object) decode(into any) error {
	if err := yaml.UnmarshalStrict(o.json, into); err != nil {
		return fmt.Errorf("%s (%s): %w", o.source, o.meta.Kind, err)
	}
	return nil
}
