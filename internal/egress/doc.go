// Package egress is the fleet's egress proxy: what runs in its container
// (cmd/egress), with the control API's client the worker calls it by.
// The worker's side (the sandboxes' networks, the proxy's container) is
// internal/egressnet.
//
// A sandbox granted a network (limits.network) is put on an internal
// Docker network of its own, with no route out and no address of the
// host on it: the one thing it can reach there is the proxy's container,
// attached to each such network and to the outside. The proxy (Proxy)
// knows each sandbox by its address on the internal network, which the
// worker registers with the sandbox's policy through the control API
// (Control) before the job starts and releases when it ends, taking back
// the accounting.
//
// The proxy resolves names itself (Resolver: a hosts map the operator
// pins, then DNS), so a sandbox needs no DNS, and it refuses a name that
// resolves into a protected range (DNS rebinding) unless the operator
// pinned it. HTTPS goes through CONNECT, and a tunnel to a name must open
// with a TLS ClientHello naming that host: no domain fronting under an
// allowed name. Only address rules (and open egress, to public
// addresses) let other protocols through.
package egress
