package jobs

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/sandfleet/sandfleet/internal/field"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/shorten"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/templates"
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

	// Workspace names the workspace the job runs in: its latest snapshot
	// is restored into the working directory before the job, and the
	// directory becomes its next snapshot after (see workspace.go).
	Workspace string `json:"workspace,omitempty"`
	// WorkspaceFrom starts from another workspace's revision: with
	// Workspace, a new workspace forked from it; alone, a copy of it whose
	// changes are not kept.
	WorkspaceFrom *WorkspaceRef `json:"workspace_from,omitempty"`
	// Outputs are globs of files under the working directory returned as
	// artifacts ("*.png", "results/**").
	Outputs []string `json:"outputs,omitempty"`

	// Compile replaces the preset's compile step (its command); a preset
	// without one runs none unless the job gives one.
	Compile []string `json:"compile,omitempty"`
	// Tests make the job a judged run: compiled once, then each case runs
	// as a fresh process in the same sandbox (see TestCase). The job
	// succeeds only when every case passed.
	Tests []TestCase `json:"tests,omitempty"`
	// StopOnFirstFailure skips the cases after the first that fails.
	StopOnFirstFailure bool `json:"stop_on_first_failure,omitempty"`

	// RetryOf names the job this one runs again (submit batch --retry
	// errors); the result carries it.
	RetryOf string `json:"retry_of,omitempty"`
}

// Status is the verdict of a job.
type Status string

// The statuses of docs/design.md. Every status but the zero value is final.
const (
	StatusSucceeded   Status = "succeeded"     // ran, exit 0
	StatusFailed      Status = "failed"        // ran, exit != 0
	StatusTimeout     Status = "timeout"       // killed at the wall-clock limit
	StatusOOM         Status = "oom"           // killed by the memory limit
	StatusOutputLimit Status = "output_limit"  // killed for writing more than the output cap
	StatusCompileErr  Status = "compile_error" // the compile step failed; nothing ran
	StatusCanceled    Status = "canceled"      // canceled before or while running
	StatusRejected    Status = "rejected"      // the job itself is invalid
	StatusError       Status = "error"         // the fleet could not run it
)

// Statuses lists every status, in the order of docs/design.md.
var Statuses = []Status{StatusSucceeded, StatusFailed, StatusCompileErr, StatusTimeout, StatusOOM,

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
	case StatusCompileErr:
		return 65
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
	ID              string `json:"id"`
	Status          Status `json:"status"`
	Exit            *int   `json:"exit_code"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	// StdoutEncoding and StderrEncoding are "base64" when the stream was not
	// valid UTF-8: it then holds the exact bytes in standard base64 rather
	// than text with replacement characters. Empty means UTF-8 text. Use
	// StdoutBytes and StderrBytes to get the bytes either way.
	StdoutEncoding  string            `json:"stdout_encoding,omitempty"`
	StderrEncoding  string            `json:"stderr_encoding,omitempty"`
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

	// Workspace is the step the job made in its workspace, if it named one.
	Workspace *WorkspaceStep `json:"workspace,omitempty"`
	// Artifacts are the files of the job's outputs that were kept, and
	// ArtifactsSkipped those that were not, with the reason; ArtifactsError
	// says why there are none at all when the job asked for some.
	Artifacts        []Artifact        `json:"artifacts,omitempty"`
	ArtifactsSkipped []SkippedArtifact `json:"artifacts_skipped,omitempty"`
	ArtifactsError   string            `json:"artifacts_error,omitempty"`

	// RetryOf is the job's retry_of: the job whose error this one retried.
	RetryOf string `json:"retry_of,omitempty"`
	// SpecDigest is the SpecDigest of the job that ran: a client that
	// finds a result at an ID it chose checks it is its own job's (Claim).
	SpecDigest string `json:"spec_digest,omitempty"`
	// ImageDigest is the image ID ("sha256:...") the job's sandbox was
	// created from: what its preset's image resolved to when it ran.
	ImageDigest string `json:"image_digest,omitempty"`
	// Compile is the compile step of a compiled preset (or the job's own).
	Compile *CompileReport `json:"compile,omitempty"`
	// Tests are a judged job's per-case verdicts and their summary.
	Tests *TestReport `json:"tests,omitempty"`
	// Egress is what a job with a network sent and received through the
	// egress proxy, per destination and verdict (allowed or denied, by
	// which rule).
	Egress []limits.NetworkUse `json:"egress,omitempty"`
	// Template is the template the job ran on (its image a template's, not
	// a preset's): its name, the registration's version and the image's
	// ID on the worker.
	Template *templates.Ref `json:"template,omitempty"`
	// Display are the job's display outputs in the order it made them: the
	// figures a matplotlib program showed or left open, like a notebook's
	// display data. DisplayDropped counts those past the bounds (count and
	// bytes per job) or of a type not shown. They are the job's own bytes,
	// for showing only.
	Display        []Display `json:"display,omitempty"`
	DisplayDropped int       `json:"display_dropped,omitempty"`
	// Cut says what was left out of the result for it to fit the most
	// a stored result may take (the server's max_payload), one line per
	// field ("egress: 400 of 512 entries dropped ..."); empty when
	// nothing was. A job whose result is cut is not run again.
	Cut []string `json:"cut,omitempty"`
}

// Display is one display output: its MIME type ("image/png") and bytes
// in standard base64, and an image's size in pixels. A session's cell
// has the same (sessionapi.CodeResult).
type Display = sessionapi.Display

// EncodingBase64 marks a stream of a Result held as base64.
const EncodingBase64 = "base64"

// SetOutput stores the job's stdout and stderr: as text when they are valid
// UTF-8, which JSON carries as is, and as base64 otherwise, so that no byte
// is altered on its way to the user.
func (r *Result) SetOutput(stdout, stderr []byte) {
	r.Stdout, r.StdoutEncoding = encodeStream(stdout)
	r.Stderr, r.StderrEncoding = encodeStream(stderr)
}

func encodeStream(b []byte) (text, encoding string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return base64.StdEncoding.EncodeToString(b), EncodingBase64
}

// StdoutBytes returns the job's stdout as it wrote it.
func (r *Result) StdoutBytes() []byte { return decodeStream(r.Stdout, r.StdoutEncoding) }

// StderrBytes returns the job's stderr as it wrote it.
func (r *Result) StderrBytes() []byte { return decodeStream(r.Stderr, r.StderrEncoding) }

func decodeStream(s, encoding string) []byte {
	if encoding == EncodingBase64 {
		if b, err := base64.StdEncoding.DecodeString(s); err == nil {
			return b
		}
	}
	return []byte(s)
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

// BatchLabel is the label pkg/batch gives each job of a batch, its value
// the batch's name: the fleet's job index files the job under it.
const BatchLabel = "sandfleet.batch"

// MaxJobBytes is the default cap on the encoded size of one job.
const MaxJobBytes = 4 << 20

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
		return invalid("id %q must match [A-Za-z0-9_-]{1,128}, or be <tenant>.<that>", shorten.Text(j.ID, 170))
	}
	if !ValidQueue(j.Queue) {
		return invalid("queue %q must match [A-Za-z0-9_-]{1,64}", shorten.Text(j.Queue, 70))
	}
	if j.Image == "" {
		return invalid("image: missing (name a preset such as \"python\")")
	}
	for _, err := range []error{
		field.FileNames(slices.Collect(maps.Keys(j.Files)), 0),
		field.Argv(j.Argv),
		field.Env(j.Env),
		field.Labels(j.Labels),
		j.validateWorkspace(),
		j.validateCompile(),
		j.validateTests(),
	} {
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidJob, err)
		}
	}
	if j.RetryOf != "" && !ValidID(j.RetryOf) {
		return invalid("retry_of %q must be a job ID", shorten.Text(j.RetryOf, 170))
	}
	if j.ReplyTo != "" {
		if err := fleet.ValidReplyTo(j.ReplyTo); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidJob, err)
		}
		if err := fleet.TenantReplyTo(TenantOf(j.ID), j.ReplyTo); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidJob, err)
		}
	}
	return nil
}

// notUTF8 names the field of a job that is not valid UTF-8. A JSON decoder
// replaces such bytes with U+FFFD without a word, so the job would run
// other code than was sent.
func notUTF8(data []byte) error {
	var top map[string]json.RawMessage
	_ = json.Unmarshal(data, &top) // it decoded as a Job a moment ago
	for _, k := range slices.Sorted(maps.Keys(top)) {
		if err := field.UTF8(k, top[k]); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidJob, err)
		}
	}
	return fmt.Errorf("%w: %w", ErrInvalidJob, field.UTF8("job", data))
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
	if !utf8.Valid(data) {
		return nil, notUTF8(data)
	}
	if dec.More() {
		return nil, invalid("trailing data after the job object")
	}
	return &j, nil
}
