package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/google/uuid"

	"github.com/sandfleet/sandfleet/pkg/limits"
)

// Job is one piece of untrusted code to run, as published on jobs.<queue>.<id>.
// The JSON form is the API: any NATS client may publish it.
type Job struct {
	ID      string            `json:"id,omitempty"`
	Queue   string            `json:"queue,omitempty"`
	Image   string            `json:"image,omitempty"` // a preset name from the worker's allowlist
	Code    string            `json:"code,omitempty"`  // written to the preset's main file
	Argv    []string          `json:"argv,omitempty"`  // overrides the preset's command
	Files   map[string]string `json:"files,omitempty"` // extra files in the working directory
	Stdin   string            `json:"stdin,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Limits  limits.Limits     `json:"limits,omitzero"`
	ReplyTo string            `json:"reply_to,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// Status is the verdict of a job.
type Status string

// The statuses of docs/design.md. Every status but the zero value is final.
const (
	StatusSucceeded   Status = "succeeded"    // ran, exit 0
	StatusFailed      Status = "failed"       // ran, exit != 0
	StatusTimeout     Status = "timeout"      // killed at the wall-clock limit
	StatusOOM         Status = "oom"          // killed by the memory limit
	StatusOutputLimit Status = "output_limit" // killed for writing more than the output cap
	StatusCanceled    Status = "canceled"     // canceled before or while running
	StatusRejected    Status = "rejected"     // the job itself is invalid
	StatusError       Status = "error"        // the fleet could not run it
)

// Statuses lists every status, in the order of docs/design.md.
var Statuses = []Status{StatusSucceeded, StatusFailed, StatusTimeout, StatusOOM,
	StatusOutputLimit, StatusCanceled, StatusRejected, StatusError}

// ExitCode is what `submit run` exits with for a result of this status.
// For failed, it is the job's own exit code.
func (r *Result) ExitCode() int {
	switch r.Status {
	case StatusSucceeded:
		return 0
	case StatusFailed:
		if r.Exit != nil && *r.Exit != 0 {
			return *r.Exit
		}
		return 1
	case StatusTimeout:
		return 124
	case StatusOOM:
		return 137
	case StatusOutputLimit:
		return 1
	case StatusCanceled:
		return 130
	case StatusRejected:
		return 2
	default:
		return 125
	}
}

// Result is the outcome of a job, stored in KV RESULTS under the job's ID and
// published to its reply subject. A figure the platform cannot give is null.
type Result struct {
	ID              string            `json:"id"`
	Status          Status            `json:"status"`
	Exit            *int              `json:"exit_code"`
	Stdout          string            `json:"stdout"`
	Stderr          string            `json:"stderr"`
	StdoutTruncated bool              `json:"stdout_truncated"`
	StderrTruncated bool              `json:"stderr_truncated"`
	DurationMS      *int64            `json:"duration_ms"`
	CPUMS           *int64            `json:"cpu_ms"`
	PeakMemoryBytes *int64            `json:"peak_memory_bytes"`
	Worker          string            `json:"worker"`
	Attempt         int               `json:"attempt"`
	QueuedAt        *time.Time        `json:"queued_at"`
	StartedAt       *time.Time        `json:"started_at"`
	FinishedAt      *time.Time        `json:"finished_at"`
	Error           string            `json:"error,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
}

// Final reports whether the status is one a job ends in.
func (s Status) Final() bool {
	for _, v := range Statuses {
		if s == v {
			return true
		}
	}
	return false
}

// DefaultQueue is the queue a job without one goes to.
const DefaultQueue = "default"

// MaxJobBytes is the default cap on the encoded size of one job.
const MaxJobBytes = 4 << 20

var (
	idPattern    = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	queuePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

// ErrInvalidJob is wrapped by every validation error of a job.
var ErrInvalidJob = errors.New("invalid job")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidJob, fmt.Sprintf(format, args...))
}

// NewID returns a fresh job ID: a UUIDv7, so IDs sort by creation time.
func NewID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// ValidID reports whether s may be used as a job ID.
func ValidID(s string) bool { return idPattern.MatchString(s) }

// ValidQueue reports whether s may be used as a queue name.
func ValidQueue(s string) bool { return queuePattern.MatchString(s) }

// Normalize fills the defaults a publisher may leave out: a UUIDv7 ID and the
// default queue.
func (j *Job) Normalize() {
	if j.ID == "" {
		j.ID = NewID()
	}
	if j.Queue == "" {
		j.Queue = DefaultQueue
	}
}

// Validate checks the parts of a job that do not depend on a worker's
// configuration: ID and queue format, file names, argv, env. Presets and
// limits against caps are the worker's to check.
func (j *Job) Validate() error {
	if !ValidID(j.ID) {
		return invalid("id %q must match [A-Za-z0-9_-]{1,128}", truncate(j.ID, 140))
	}
	if !ValidQueue(j.Queue) {
		return invalid("queue %q must match [A-Za-z0-9_-]{1,64}", truncate(j.Queue, 70))
	}
	if j.Image == "" {
		return invalid("image: missing (name a preset such as \"python\")")
	}
	for name := range j.Files {
		if err := ValidFileName(name); err != nil {
			return invalid("files[%q]: %v", truncate(name, 140), err)
		}
	}
	for i, a := range j.Argv {
		if bytes.IndexByte([]byte(a), 0) >= 0 {
			return invalid("argv[%d] contains a NUL byte", i)
		}
	}
	if len(j.Argv) > 0 && j.Argv[0] == "" {
		return invalid("argv[0] is empty")
	}
	for k, v := range j.Env {
		if k == "" || bytes.ContainsAny([]byte(k), "=\x00") || bytes.IndexByte([]byte(v), 0) >= 0 {
			return invalid("env[%q]: names must be non-empty without '=' or NUL, values without NUL", truncate(k, 140))
		}
	}
	if j.ReplyTo != "" && !validSubject(j.ReplyTo) {
		return invalid("reply_to %q is not a valid NATS subject", truncate(j.ReplyTo, 140))
	}
	return nil
}

// ValidFileName reports whether name may be written into the working
// directory: a relative path with no "..", no absolute part and no NUL.
func ValidFileName(name string) error {
	if name == "" || len(name) > 255 {
		return errors.New("name must be 1 to 255 bytes")
	}
	if name[0] == '/' {
		return errors.New("name must be relative")
	}
	for _, part := range bytes.Split([]byte(name), []byte("/")) {
		if len(part) == 0 || string(part) == "." || string(part) == ".." {
			return errors.New("name must not contain empty, '.' or '..' parts")
		}
	}
	if bytes.IndexByte([]byte(name), 0) >= 0 {
		return errors.New("name contains a NUL byte")
	}
	return nil
}

func validSubject(s string) bool {
	if len(s) > 255 {
		return false
	}
	for _, tok := range bytes.Split([]byte(s), []byte(".")) {
		if len(tok) == 0 {
			return false
		}
		for _, c := range tok {
			if c <= ' ' || c == '*' || c == '>' || c == 0x7f {
				return false
			}
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Decode parses one job from its wire form, rejecting unknown fields,
// trailing data and anything over maxBytes (0 means MaxJobBytes). The ID and
// queue the message was published under are the caller's to reconcile.
func Decode(data []byte, maxBytes int) (*Job, error) {
	if maxBytes <= 0 {
		maxBytes = MaxJobBytes
	}
	if len(data) > maxBytes {
		return nil, invalid("job is %d bytes, over the cap of %d", len(data), maxBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var j Job
	if err := dec.Decode(&j); err != nil {
		return nil, invalid("not a job object: %v", err)
	}
	if dec.More() {
		return nil, invalid("trailing data after the job object")
	}
	return &j, nil
}
