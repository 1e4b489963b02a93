package jobs

// Stream names one of a job's output streams.
type Stream string

const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)
