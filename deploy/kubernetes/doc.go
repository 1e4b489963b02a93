// Package kubernetes holds the fleet's manifests for a Kubernetes cluster:
// the worker as a DaemonSet on nodes that run dockerd, NATS as a 3-node
// StatefulSet with nats.conf from a ConfigMap and passwords from a Secret,
// and a Service for submitters. Its test decodes every manifest strictly
// into the Kubernetes API types and checks the fleet's invariants; no
// cluster is needed.
package kubernetes
