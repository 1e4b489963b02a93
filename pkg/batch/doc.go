// Package batch runs a file of jobs on a sandfleet fleet: JSONL, one
// jobs.Job per line, as `submit batch` does. Orchestrators written in Go
// use it directly:
//
//	r, _ := batch.New(client, batch.Config{Name: "nightly", OnResult: write})
//	sum, err := r.Run(ctx, file) // file: an io.ReadSeeker, read twice
//
// # Stable IDs and resume
//
// A line's job ID is its own "id" when it has one. Otherwise it is derived
// from the batch name and the line's content:
//
//	<name>-<first 24 hex digits of sha256(name, canonical JSON of the line, k)>
//
// where k counts earlier lines of the batch with the same content (so two
// identical lines are two jobs). Running the same batch again therefore
// names the same jobs: a job whose result is stored in RESULTS is not
// published again (its result is reused), one still queued or running is
// waited for (a second publish of its ID is dropped by the stream's
// duplicate window, and the worker's RESULTS check covers the rest).
//
// The content, not the line number, is hashed on purpose: an edited line
// (a fixed solution) is a new job and runs, rather than silently reusing
// the result of the code it replaced; inserting or deleting lines does not
// shift the IDs of the others. A batch renamed (another file name, or
// another Config.Name) is a new batch.
//
// # Reading the input
//
// Run reads the input twice and holds neither pass in memory: the first
// pass validates every line and counts the jobs (with Config.Strict a bad
// line stops the batch before anything is published), the second streams
// the jobs out through a bounded window. Per job the runner keeps its ID
// hash and line number, never its code.
//
// # Waiting for results
//
// One watch on the RESULTS bucket (updates only), opened before the first
// job is looked up or published, dispatches every result stored during the
// run to the job in flight it belongs to. That costs one consumer for the
// whole batch instead of one per job; results of other clients' jobs
// stored meanwhile are received and dropped.
package batch
