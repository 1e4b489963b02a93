package records

import (
	"time"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// The records of the job index, the stream INDEX: what a worker writes
// here (index.go) and internal/jobindex reads.

// NoBatch is the batch token of the index's subjects (see internal/fleet)
// for a job outside any batch; it cannot be a batch name, which is
// [A-Za-z0-9_-]{1,64}.
const NoBatch = "~"

// BatchOf returns the batch token of a job with these labels: the value of
// jobs.BatchLabel when it is a valid batch name, else NoBatch.
func BatchOf(labels map[string]string) string {
	if b := labels[jobs.BatchLabel]; jobs.ValidQueue(b) {
		return b
	}
	return NoBatch
}

// State says where a summary record was written.
type State string

const (
	// JobRunning: a worker took the job (its result is not stored yet).
	Running State = "running"
	// JobFinished: the job's result is stored; Status is its verdict.
	Finished State = "finished"
)

// Summary is a job's record in the index: enough to list it, filter it
// and link to it.
type Summary struct {
	ID      string      `json:"id"`
	Queue   string      `json:"queue"`
	State   State       `json:"state"`
	Status  jobs.Status `json:"status,omitempty"` // when finished
	Attempt int         `json:"attempt,omitempty"`
	Worker  string      `json:"worker,omitempty"`
	Image   string      `json:"image,omitempty"`
	// Labels are the job's, each value cut to 256 bytes and all of them
	// to 4 KiB (LabelsCut then says so).
	Labels    map[string]string `json:"labels,omitempty"`
	LabelsCut bool              `json:"labels_cut,omitempty"`
	Workspace string            `json:"workspace,omitempty"`
	// Revision is the workspace revision the job produced (finished).
	Revision   int64      `json:"revision,omitempty"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	DurationMS *int64     `json:"duration_ms,omitempty"`
	QueuedAt   *time.Time `json:"queued_at,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	Error      string     `json:"error,omitempty"`
	// DeadLetter marks a job given up after MaxDeliver.
	DeadLetter bool `json:"dead_letter,omitempty"`

	// Seq is the record's stream sequence; set when it is read, not stored.
	Seq uint64 `json:"-"`
}

// Batch returns the job's batch, "" when it is in none.
func (s *Summary) Batch() string {
	if b := BatchOf(s.Labels); b != NoBatch {
		return b
	}
	return ""
}

// Subject is where the record is published.
func (s *Summary) Subject() string {
	return fleet.IndexJobSubject(s.Queue, BatchOf(s.Labels), s.ID)
}

// Spec is what a job asked for, as its page shows it: the code and the
// files (cut to 16 KiB and 4 KiB each, 16 KiB in all), argv, limits and
// outputs. The environment's values and the stdin
// are left out (they may carry secrets): only their names and size.
type Spec struct {
	ID            string             `json:"id"`
	Queue         string             `json:"queue"`
	Image         string             `json:"image,omitempty"`
	Code          string             `json:"code,omitempty"`
	CodeBytes     int                `json:"code_bytes,omitempty"` // the whole code's size
	Argv          []string           `json:"argv,omitempty"`
	ArgvCut       bool               `json:"argv_cut,omitempty"`
	Files         []SpecFile         `json:"files,omitempty"` // by name
	FilesCut      int                `json:"files_cut,omitempty"`
	Env           []string           `json:"env,omitempty"` // names, sorted
	StdinBytes    int                `json:"stdin_bytes,omitempty"`
	Limits        limits.Limits      `json:"limits,omitzero"`
	Outputs       []string           `json:"outputs,omitempty"`
	Workspace     string             `json:"workspace,omitempty"`
	WorkspaceFrom *jobs.WorkspaceRef `json:"workspace_from,omitempty"`
}

// SpecFile is one of a job's files, its text cut.
type SpecFile struct {
	Name  string `json:"name"`
	Bytes int    `json:"bytes"`
	Text  string `json:"text,omitempty"`
}

// CodeCut reports whether Code is shorter than the job's code.
func (s *Spec) CodeCut() bool { return s.CodeBytes > len(s.Code) }

// Cut reports whether Text is shorter than the file.
func (f SpecFile) Cut() bool { return f.Bytes > len(f.Text) }
