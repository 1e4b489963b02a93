// Package fleet is the layout of a sandfleet fleet in JetStream, as its
// workers make and keep it: the names of the streams, buckets, subjects and
// objects, and the Topology that creates or updates them.
//
// Topology: stream JOBS (work-queue retention, file storage, DiscardNew
// with message and byte limits, one message per subject, so per job ID),
// one durable pull consumer workers-<queue> per queue (explicit ack,
// AckWait as the lease, MaxDeliver, MaxAckPending), and the KV buckets
// RESULTS (first writer wins, TTL), WORKERS (heartbeats, TTL) and CANCELS
// (cancel requests), and the stream EVENTS (limits retention, a short
// MaxAge), where the worker running a job publishes its events on
// events.<id>: its output as it is written and its lifecycle, for
// watching; the result in RESULTS stays the authority. Workers create or
// update it (Topology.Ensure); clients create only what is missing
// (Topology.Open). Workspaces add the bucket WORKSPACES (heads) and the
// object stores SNAPSHOTS and ARTIFACTS, which clients open on first use.
//
// The public client, pkg/jobs, opens what it needs through this package;
// nothing outside the fleet's own code (internal/worker, cmd/worker, the
// gateway's and the CLI's set-up, tests) needs it.
package fleet
