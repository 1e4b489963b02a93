// Package jobs is sandfleet's wire contract and client API.
//
// Wire: a Job is JSON published to jobs.<queue>.<id>; its Result is JSON in KV bucket RESULTS under <id> and,
// when the job names one, on its reply_to subject. Any NATS client may speak
// it; this package is a convenience, not a requirement.
//
// Topology: stream JOBS (work-queue retention, file storage, DiscardNew
// with message and byte limits, one message per subject, so per job ID),
// one
// durable pull consumer workers-<queue> per queue (explicit ack, AckWait as
// the lease, MaxDeliver, MaxAckPending), and the KV buckets RESULTS (first
// writer wins, TTL), WORKERS (heartbeats, TTL) and CANCELS (cancel
// requests), and the stream EVENTS (limits retention, a short MaxAge),
// where the worker running a job publishes its Events on events.<id>: its
// output as it is written and its lifecycle, for watching; the result in
// RESULTS stays the authority. Workers create or update it
// (Topology.Ensure); clients create only what is missing (Topology.Open).
// Workspaces add the bucket WORKSPACES (heads) and the object stores
// SNAPSHOTS and ARTIFACTS (workspace.go), which clients open on first use.
//
// Client: Submit, Get, Wait (a KV watch), SubmitAndWait (the watch opened
// before the publish), Follow (a job's events from the start, ending with
// its result), Queued, Phase (queued or running) and Cancel; Workspace,
// Workspaces, DeleteWorkspace, WriteSnapshot, ExtractWorkspace,
// WriteArtifact and DownloadArtifacts. Errors to test with errors.Is:
// ErrQueueFull, ErrNotFound, ErrFinished, ErrInvalidJob, ErrNoWorkspace,
// ErrNoRevision, ErrDigest.
package jobs
