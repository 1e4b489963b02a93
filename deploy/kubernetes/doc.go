// Package kubernetes holds the fleet's manifests for a Kubernetes cluster,
// a kustomize base and two overlays. The base: NATS as a 3-node
// StatefulSet with nats.conf from a ConfigMap and passwords from a Secret,
// a Service for submitters, and the worker as a DaemonSet without its
// engine. The overlays give the worker its Docker engine: node-engine the
// node's dockerd (clusters whose nodes run Docker), engine-sidecar a
// privileged dockerd in each worker pod (clusters on containerd). Its test
// renders both overlays (resources and strategic-merge patches, the part
// of kustomize they use), decodes every object strictly into the
// Kubernetes API types and checks the fleet's invariants; no cluster is
// needed. A Docker test runs the engine-sidecar pod's two containers with
// plain Docker, wired as the manifest wires them.
package kubernetes
