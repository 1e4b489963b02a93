package worker

import "github.com/sandfleet/sandfleet/internal/jobrun"

// The worker's names for what it hands its executor with each run; the
// types live in internal/jobrun, which the executor imports instead of
// the worker.
type (
	RunOptions     = jobrun.Options
	Snapshot       = jobrun.Snapshot
	ArchiveRequest = jobrun.ArchiveRequest
	Start          = jobrun.Start
)
