// Package gateway is sandfleet's HTTP API: a stateless front door over the
// fleet's JetStream topology, for the orchestrators that speak HTTP
// rather than NATS (clients/python, clients/typescript, curl).
//
//	POST /v1/jobs[?wait=D]           queue a job; with wait, its result (200) or 202
//	GET  /v1/jobs/{id}[?wait=D]      the result (200), 202 while queued or running, 404
//	POST /v1/jobs/{id}/cancel        cancel; 200 canceled, 202 canceling, 409 finished
//	GET  /v1/jobs/{id}/events        output and lifecycle as Server-Sent Events
//	GET  /v1/jobs/{id}/artifacts[/{name...}]  what the job kept; one file's bytes
//	GET  /v1/workspaces/{name}[/snapshot]     a workspace's head; its tar
//	POST /v1/batches                 JSONL in, results streamed back as JSONL
//	GET  /v1/status                  workers and queues
//	GET  /healthz, /readyz, /metrics, /openapi.yaml
//	GET  /, /jobs, /batches, /workspaces, ...  the web console (internal/console)
//
// openapi.yaml is the contract; TestOpenAPI checks every route's requests
// and answers against it.
//
// # Waiting
//
// POST /v1/jobs?wait= names a subject under the gateway's own inbox as the
// job's reply_to and takes the result there (replies.go): one subscription
// per gateway, no JetStream consumer per request. GET ?wait= opens a KV
// watch, as it may wait for a job someone else submitted. RESULTS is the
// authority either way: when the wait ends without an answer, the result
// (or the job's phase) is read from JetStream.
//
// # Errors
//
// A handler returns an error; classify maps it, in one place, to a status
// and a stable code, and writeError answers {"error": {"code", "message"}}.
// Internal failures are logged, never sent.
//
// # Limits
//
// Each route says how large a body it takes and whether it waits or
// streams; wrap applies that to every request: MaxBytesReader (413), a
// read deadline for the body (408), a write deadline for the answer, and
// for streams one per line, so a client that stops reading is cut off.
// Long polls, event streams and batches each take a slot first (429 when
// none is free, on the gateway or within the token's or its tenant's
// share); a full queue is 429 queue_full. Both carry Retry-After.
//
// # Authentication
//
// Bearer tokens, stored as SHA-256 hashes (ParseTokens, NewToken), each
// with a name that goes on the jobs it submits (label sandfleet.token)
// and optionally the queues it may use (403 otherwise), and role=read for
// a token that may only read (403 on the routes that write). A job ID is
// a capability among the tokens of one scope. A token of tenant=T is T's:
// New decides once which client serves each token (tenants.go), T's
// tokens going through a client of T over T's own NATS connection, and
// every route asks the token's scope (internal/scope) to name a job or
// workspace, so another's is 404 as an unknown one. The console's login
// cookie (a session ID, which the console turns into its token while the
// session lasts) is taken like a bearer token on GET routes only.
package gateway
