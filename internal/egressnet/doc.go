// Package egressnet is the worker's side of egress: the egress proxy's
// container (internal/egress, cmd/egress), and a Docker network of its
// own for each sandbox granted a network, which holds the sandbox and the
// proxy only (Networks.Prepare). The worker registers each sandbox's
// address and policy with the proxy before its job starts (Admit), keeps
// the live registrations to give a restarted proxy again (watch.go), and
// takes back the sandbox's accounting when it ends (Release).
//
// It links the Docker client; the proxy does not, so that its image
// holds the proxy alone.
package egressnet
