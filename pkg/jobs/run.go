package jobs

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
}
