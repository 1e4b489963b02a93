// Package worker is the pull loop of a sandfleet worker: N slots over the
// durable JetStream consumers of one or more queues (priority lanes with
// weights, lanes.go), a slot taken before every fetch, lease
// heartbeats while a job runs, the result stored once (first writer wins)
// and published to the job's reply subject, drain on shutdown, and back-off
// instead of burnt deliveries when the executor's infrastructure is down.
// While a job runs, its output and lifecycle are published as events for
// watchers (events.go), never holding the job up.
//
// Outcomes are decided once per message (a decision) and mapped to ack,
// term or nak in one place (settle).
package worker
