package jobs

import (
	"encoding/json"
	"maps"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// Tokens of the index's subjects (see internal/fleet).
const (
	// NoBatch is the batch token of a job outside any batch; it cannot be
	// a batch name, which is [A-Za-z0-9_-]{1,64}.
	NoBatch = "~"
	// BatchLabel is the label pkg/batch gives each job of a batch, its
	// value the batch's name: the index files the job under it.
	BatchLabel = "sandfleet.batch"
)

// BatchOf returns the batch token of a job with these labels: the value of
// BatchLabel when it is a valid batch name, else NoBatch.
func BatchOf(labels map[string]string) string {
	if b := labels[BatchLabel]; ValidQueue(b) {
		return b
	}
	return NoBatch
}

// JobState says where a summary record was written.
type JobState string

const (
	// JobRunning: a worker took the job (its result is not stored yet).
	JobRunning JobState = "running"
	// JobFinished: the job's result is stored; Status is its verdict.
	JobFinished JobState = "finished"
)

// Caps on what one record holds, so that the index stays small: a record
// is for listing and finding, the result and the job have the rest.
const (
	indexMaxError    = 512      // bytes of Error
	indexMaxLabel    = 256      // bytes of one label value
	indexMaxLabels   = 4 << 10  // bytes of all labels' keys and values
	SpecMaxCode      = 16 << 10 // bytes of the code kept in a JobSpec
	SpecMaxFileText  = 4 << 10  // bytes of one file kept in a JobSpec
	SpecMaxFilesText = 16 << 10 // bytes of all files kept in a JobSpec
	specMaxFiles     = 64
	specMaxArgv      = 4 << 10
)

// JobSummary is a job's record in the index: enough to list it, filter it
// and link to it.
type JobSummary struct {
	ID      string   `json:"id"`
	Queue   string   `json:"queue"`
	State   JobState `json:"state"`
	Status  Status   `json:"status,omitempty"` // when finished
	Attempt int      `json:"attempt,omitempty"`
	Worker  string   `json:"worker,omitempty"`
	Image   string   `json:"image,omitempty"`
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
func (s *JobSummary) Batch() string {
	if b := BatchOf(s.Labels); b != NoBatch {
		return b
	}
	return ""
}

// Subject is where the record is published.
func (s *JobSummary) Subject() string {
	return fleet.IndexJobSubject(s.Queue, BatchOf(s.Labels), s.ID)
}

// RunningSummary is the record of a job a worker has taken (attempt is its
// delivery, queuedAt when it was published).
func RunningSummary(job *Job, worker string, attempt int, queuedAt *time.Time) *JobSummary {
	now := time.Now().UTC()
	s := &JobSummary{ID: job.ID, Queue: job.Queue, State: JobRunning, Attempt: attempt, Worker: worker,
		Image: cutText(job.Image, 64), Workspace: job.Workspace, QueuedAt: queuedAt, StartedAt: &now}
	s.Labels, s.LabelsCut = cutLabels(job.Labels)
	return s
}

// FinishedSummary is the record of a job whose result res is stored; job
// (nil when it did not decode) supplies what the result lacks.
func FinishedSummary(queue string, job *Job, res *Result) *JobSummary {
	s := &JobSummary{ID: res.ID, Queue: queue, State: JobFinished, Status: res.Status, Attempt: res.Attempt,
		Worker: res.Worker, ExitCode: res.Exit, DurationMS: res.DurationMS, QueuedAt: res.QueuedAt,
		StartedAt: res.StartedAt, FinishedAt: res.FinishedAt, Error: cutText(res.Error, indexMaxError)}
	labels := res.Labels
	if job != nil {
		s.Image, s.Workspace = cutText(job.Image, 64), job.Workspace
		if labels == nil {
			labels = job.Labels
		}
	}
	s.Labels, s.LabelsCut = cutLabels(labels)
	if ws := res.Workspace; ws != nil {
		if ws.Name != "" {
			s.Workspace = ws.Name
		}
		s.Revision = ws.Revision
	}
	return s
}

// JobSpec is what a job asked for, as its page shows it: the code and the
// files (cut to SpecMaxCode and SpecMaxFileText each, SpecMaxFilesText in
// all), argv, limits and outputs. The environment's values and the stdin
// are left out (they may carry secrets): only their names and size.
type JobSpec struct {
	ID            string        `json:"id"`
	Queue         string        `json:"queue"`
	Image         string        `json:"image,omitempty"`
	Code          string        `json:"code,omitempty"`
	CodeBytes     int           `json:"code_bytes,omitempty"` // the whole code's size
	Argv          []string      `json:"argv,omitempty"`
	ArgvCut       bool          `json:"argv_cut,omitempty"`
	Files         []SpecFile    `json:"files,omitempty"` // by name
	FilesCut      int           `json:"files_cut,omitempty"`
	Env           []string      `json:"env,omitempty"` // names, sorted
	StdinBytes    int           `json:"stdin_bytes,omitempty"`
	Limits        limits.Limits `json:"limits,omitzero"`
	Outputs       []string      `json:"outputs,omitempty"`
	Workspace     string        `json:"workspace,omitempty"`
	WorkspaceFrom *WorkspaceRef `json:"workspace_from,omitempty"`
}

// SpecFile is one of a job's files, its text cut.
type SpecFile struct {
	Name  string `json:"name"`
	Bytes int    `json:"bytes"`
	Text  string `json:"text,omitempty"`
}

// CodeCut reports whether Code is shorter than the job's code.
func (s *JobSpec) CodeCut() bool { return s.CodeBytes > len(s.Code) }

// Cut reports whether Text is shorter than the file.
func (f SpecFile) Cut() bool { return f.Bytes > len(f.Text) }

// NewJobSpec returns the spec record of job.
func NewJobSpec(job *Job) *JobSpec {
	s := &JobSpec{ID: job.ID, Queue: job.Queue, Image: cutText(job.Image, 64), Code: cutText(job.Code, SpecMaxCode),
		CodeBytes: len(job.Code), StdinBytes: len(job.Stdin), Limits: job.Limits, Outputs: job.Outputs,
		Workspace: job.Workspace, WorkspaceFrom: job.WorkspaceFrom}
	n := 0
	for _, a := range job.Argv {
		if n += len(a); n > specMaxArgv {
			s.ArgvCut = true
			break
		}
		s.Argv = append(s.Argv, a)
	}
	room := SpecMaxFilesText
	for _, name := range slices.Sorted(maps.Keys(job.Files)) {
		if len(s.Files) == specMaxFiles {
			s.FilesCut++
			continue
		}
		text := cutText(job.Files[name], min(SpecMaxFileText, room))
		room -= len(text)
		s.Files = append(s.Files, SpecFile{Name: cutText(name, 512), Bytes: len(job.Files[name]), Text: text})
	}
	if len(s.Outputs) > 64 {
		s.Outputs = s.Outputs[:64]
	}
	s.Env = slices.Sorted(maps.Keys(job.Env))
	return s
}

// cutText returns s cut to at most n bytes, at a character boundary.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// cutLabels returns labels within the index's caps, and whether any was
// cut or left out. The batch label always stays: the subject files the
// record under it.
func cutLabels(labels map[string]string) (map[string]string, bool) {
	if len(labels) == 0 {
		return nil, false
	}
	out := make(map[string]string, len(labels))
	cut := false
	room := indexMaxLabels
	keys := slices.Sorted(maps.Keys(labels))
	if _, ok := labels[BatchLabel]; ok {
		keys = append([]string{BatchLabel}, slices.DeleteFunc(keys, func(k string) bool { return k == BatchLabel })...)
	}
	for _, k := range keys {
		v := cutText(labels[k], indexMaxLabel)
		if len(v) < len(labels[k]) {
			cut = true
		}
		if len(k)+len(v) > room {
			cut = true
			continue
		}
		room -= len(k) + len(v)
		out[k] = v
	}
	return out, cut
}

// DecodeSummary parses a summary record.
func DecodeSummary(data []byte) (*JobSummary, error) {
	var s JobSummary
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, err
	}
	return &s, nil
}
