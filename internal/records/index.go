package records

import (
	"maps"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// Caps on what one record holds, so that the index stays small: a record
// is for listing and finding, the result and the job have the rest.
const (
	indexMaxError    = 512      // bytes of Error
	indexMaxLabel    = 256      // bytes of one label value
	indexMaxLabels   = 4 << 10  // bytes of all labels' keys and values
	SpecMaxCode      = 16 << 10 // bytes of the code kept in a jobs.JobSpec
	SpecMaxFileText  = 4 << 10  // bytes of one file kept in a jobs.JobSpec
	SpecMaxFilesText = 16 << 10 // bytes of all files kept in a jobs.JobSpec
	specMaxFiles     = 64
	specMaxArgv      = 4 << 10
)

// RunningSummary is the record of a job a worker has taken (attempt is its
// delivery, queuedAt when it was published).
func RunningSummary(job *jobs.Job, worker string, attempt int, queuedAt *time.Time) *Summary {
	now := time.Now().UTC()
	s := &Summary{ID: job.ID, Queue: job.Queue, State: Running, Attempt: attempt, Worker: worker,
		Image: cutText(job.Image, 64), Workspace: job.Workspace, QueuedAt: queuedAt, StartedAt: &now}
	s.Labels, s.LabelsCut = cutLabels(job.Labels)
	return s
}

// FinishedSummary is the record of a job whose result res is stored; job
// (nil when it did not decode) supplies what the result lacks.
func FinishedSummary(queue string, job *jobs.Job, res *jobs.Result) *Summary {
	s := &Summary{ID: res.ID, Queue: queue, State: Finished, Status: res.Status, Attempt: res.Attempt,
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

// NewJobSpec returns the spec record of job.
func NewJobSpec(job *jobs.Job) *Spec {
	s := &Spec{ID: job.ID, Queue: job.Queue, Image: cutText(job.Image, 64), Code: cutText(job.Code, SpecMaxCode),
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
	if _, ok := labels[jobs.BatchLabel]; ok {
		keys = append([]string{jobs.BatchLabel}, slices.DeleteFunc(keys, func(k string) bool { return k == jobs.BatchLabel })...)
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
