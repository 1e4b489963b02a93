// Package jobs is sandfleet's wire contract and its Go client.
//
// Wire: a Job is JSON published to jobs.<queue>.<id>; its Result is JSON
// in the KV bucket RESULTS under <id> and, when the job names one, on its
// reply_to subject. A worker running a job publishes its Events (its
// output as it is written, and its lifecycle) on events.<id>; the result
// in RESULTS stays the authority. Any NATS client may speak it; this
// package is a convenience, not a requirement. The fleet's workers create
// and keep the streams and buckets (internal/fleet); a client creates only
// what it finds missing, with the defaults.
//
// Client: NewClient (a Config of its own: the cap on a job's size and how
// long Cancel waits) or NewTenantClient; Submit, SubmitWhenRoom, Get, Wait
// (a KV watch), SubmitAndWait (the watch opened before the publish),
// Follow (a job's events from the start, ending with its result),
// WatchResults (one watch for a batch), Pending and Phase (queued or
// running), Cancel and Status; Workspace, Workspaces, DeleteWorkspace,
// WriteSnapshot, ExtractWorkspace, WriteArtifact and DownloadArtifacts.
// The examples run against an
// in-process fleet.
//
// Errors to test with errors.Is: ErrQueueFull, ErrNotFound, ErrFinished
// (a *FinishedError, with the job's result), ErrCancelPending,
// ErrConflict (a *ConflictError), ErrInvalidJob, ErrInvalidConfig,
// ErrNotTenants, ErrNoWorkspace, ErrNoWorkspaces, ErrNoRevision,
// ErrDigest.
//
// # Tenants
//
// Several teams share a fleet (one JetStream account, one JOBS
// stream, the same lanes and workers) without seeing each other's jobs.
// What belongs to tenant t is named by a subject token t, so that NATS
// permissions, which match whole tokens, can confine t's credentials to it
// (deploy/compose/tenants.sh writes them):
//
//	job ID         t.<id>                     (ValidID)
//	job subject    jobs.<queue>.t.<id>        t may publish jobs.*.t.*
//	result         RESULTS key t.<id>         t may direct-get and subscribe to $KV.RESULTS.t.*
//	cancel         CANCELS key t.<id>         t may put $KV.CANCELS.t.*
//	inbox          _INBOX.t.<...>             t alone may subscribe _INBOX.t.> and results.t.>
//	reply_to       _INBOX.t.> or results.t.>  checked by Validate: a tenant's job replies only to it
//	workspace      WORKSPACES key t.<name>    t may direct-get, list and watch $KV.WORKSPACES.t.*, purge its own
//	snapshots      object store SNAPSHOTS_t   a stream of t's own: t reads it, deletes in it
//	artifacts      object store ARTIFACTS_t   the same
//	events         events.t.<id> in EVENTS_t  t may create a consumer there filtered to events.t.*, direct-get its last
//
// A workspace is its tenant's: a job names only its own tenant's
// workspaces, qualified as its ID is (t.<name> for t's job, a name without
// a tenant for a job of none), in workspace and workspace_from alike;
// Validate checks it against the job's ID, which the worker takes from the
// subject, so a job of t naming another's workspace is rejected whatever
// its publisher sent. Objects get a bucket per tenant, not a key prefix:
// an object's name appears base64-encoded in its subject ($O.<bucket>.M.<b64>),
// which no permission can match by prefix, while a bucket's stream name is
// a token of every API subject about it. It also makes a head harmless
// whatever it says (t may write its own heads, as it may remove them): a
// worker reads and writes the snapshots of t's job in t's store alone.
//
// A tenant reads nothing else: no info of a shared stream or consumer (it
// would list other tenants' keys through a subjects filter), no message
// of JOBS.
// So a TenantClient works without them: Get is a direct get, a watch an
// ordered consumer filtered to one key, Follow a consumer filtered to one
// job's events, and Cancel and Follow cannot tell a queued job from an
// unknown ID (ErrCancelPending for both, until a worker answers; queued).
// Workers serve every tenant and know none in advance: a tenant's object
// stores and events stream are made by the first worker that needs them.
//
// # Tenants' limits
//
// No tenant may exhaust what another or the operator needs. A
// stream's consumers are one pool (1,000 by default) for all who create
// them, so a tenant creates none on a stream anyone else reads: it waits
// for a result by a subscription to the key's subject and direct gets
// (keyWatch, as the operator's client does too), and follows its jobs on
// EVENTS_t, whose consumers are capped (256 by default) and
// expire when idle, durable or not. The server's JetStream API has one request queue, dropped whole
// when full, and no per-user rate: a tenant can flood it, which delays
// every API call, but a result wait makes none (a direct get is answered
// by the stream), so a flood costs another tenant's waits CPU, not the
// wait. Accounts would give per-tenant connection, subscription and
// JetStream limits, but not a queue of their own, and would split the one
// topology the workers serve; docs/operations.md (Tenants) measures the residue.
package jobs
