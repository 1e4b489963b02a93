package jobs

import "github.com/sandfleet/sandfleet/pkg/limits"

// Stream names one of a job's output streams.
type Stream string

const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

// RunOptions are what one run of a job needs beyond the job itself: the
// worker gives them to its executor with each job.
type RunOptions struct {
	// OnOutput, if set, is told each piece of the job's stdout and stderr
	// as the sandbox writes it, in order, before the result. It is called
	// from the goroutine reading the sandbox and must not block: a slow
	// consumer would hold up the job's output, and with it the job.
	OnOutput func(s Stream, p []byte)
	// OnStart, if set, is told once per run, before any OnOutput, that the
	// job is being handed to its sandbox: which one, and the limits it
	// runs under. Like OnOutput it must not block.
	OnStart func(Start)
}

// Start is what RunOptions.OnStart is told.
type Start struct {
	Container string        // the sandbox's name (a short container ID)
	Limits    limits.Limits // the job's limits, resolved: every field set
}
