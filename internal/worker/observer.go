package worker

import "github.com/sandfleet/sandfleet/pkg/jobs"

// Observer is told of what happens to jobs, for metrics: cmd/worker
// implements it with Prometheus, so that this package knows nothing of
// HTTP or of a metrics library. What a gauge needs is read instead:
// Status (slots, busy, ready, draining) and Held.
//
// Methods are called from the worker's goroutines, concurrently, and must
// return quickly.
type Observer interface {
	// Delivered: a job's message reached this worker; attempt is its
	// delivery count (above 1: a redelivery).
	Delivered(attempt int)
	// Finished: this worker decided the job's outcome: it stored res as the
	// job's result (won the first-writer-wins store), or could not store it
	// because the job's ID is not a valid key. Summed over a fleet, that is
	// one call per job. preset is the job's image field as submitted ("" if
	// the job did not decode): untrusted, so bound its values before using
	// it as a label. queue is the queue the job came from (one this worker
	// serves).
	Finished(res *jobs.Result, preset, queue string)
	// DeadLettered: this worker removed a job given up after MaxDeliver
	// (its error result, if this worker stored it, went to Finished).
	DeadLettered()
}

type nopObserver struct{}

func (nopObserver) Delivered(int)                         {}
func (nopObserver) Finished(*jobs.Result, string, string) {}
func (nopObserver) DeadLettered()                         {}

// presetOf is the preset a job asked for, for Observer.Finished.
func presetOf(job *jobs.Job) string {
	if job == nil {
		return ""
	}
	return job.Image
}
