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
// WriteSnapshot, ExtractWorkspace, WriteArtifact and DownloadArtifacts;
// Index, the job index the console lists. The examples run against an
// in-process fleet.
//
// Errors to test with errors.Is: ErrQueueFull, ErrNotFound, ErrFinished
// (a *FinishedError, with the job's result), ErrCancelPending,
// ErrConflict (a *ConflictError), ErrInvalidJob, ErrInvalidConfig,
// ErrNotTenants, ErrNoWorkspace, ErrNoWorkspaces, ErrNoRevision,
// ErrDigest.
package jobs
