// Package sessionapi is what a session answers: its operations, their
// requests and results, and its error codes, defined once for every side
// that speaks them. The client (pkg/sessions) sends them, the gateway
// serves them over HTTP, the worker's session host checks and forwards
// them, and the agent in the sandbox (the launcher) answers them: a
// process, a file entry or an error is one type from the agent to the
// caller, so that no side translates another's by hand.
//
// The package needs nothing but the standard library and pkg/limits, so
// that the sandbox's agent links no NATS client.
package sessionapi
