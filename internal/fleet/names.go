package fleet

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Names of the JetStream objects sandfleet uses. They are part of the wire
// contract: any NATS client may publish to SubjectPrefix+"<queue>.<id>" and
// read RESULTS.
const (
	StreamName    = "JOBS"
	SubjectPrefix = "jobs."
	ResultsBucket = "RESULTS"
	WorkersBucket = "WORKERS"
	CancelsBucket = "CANCELS"
)

// Subject returns the subject a job is published on: jobs.<queue>.<id>.
func Subject(queue, id string) string { return SubjectPrefix + queue + "." + id }

// ConsumerName returns the durable pull consumer that serves a queue.
func ConsumerName(queue string) string { return "workers-" + queue }

// ErrBadSubject is returned by ParseSubject for a subject that is not
// jobs.<queue>.<id>.
var ErrBadSubject = errors.New("subject is not jobs.<queue>.<id>")

// ParseSubject splits jobs.<queue>.<id>, where a tenant's id is
// <tenant>.<id> (jobs.<queue>.<tenant>.<id>). It checks the shape only; the
// queue and ID formats are Validate's to check.
func ParseSubject(subject string) (queue, id string, err error) {
	rest, ok := strings.CutPrefix(subject, SubjectPrefix)
	if !ok {
		return "", "", fmt.Errorf("%w: %q", ErrBadSubject, subject)
	}
	queue, id, ok = strings.Cut(rest, ".")
	if !ok || queue == "" || id == "" || strings.Count(id, ".") > 1 || strings.HasPrefix(id, ".") || strings.HasSuffix(id, ".") {
		return "", "", fmt.Errorf("%w: %q", ErrBadSubject, subject)
	}
	return queue, id, nil
}

// Names of the event stream, part of the wire contract like StreamName: a
// job's events are published on EventSubjectPrefix+"<id>" into the stream
// EventsStreamName, by the worker that runs it.
const (
	EventsStreamName   = "EVENTS"
	EventSubjectPrefix = "events."
)

// EventSubject returns the subject of a job's events: events.<id>.
func EventSubject(id string) string { return EventSubjectPrefix + id }

// EventsStreamOf is the stream of the events of tenant t's jobs:
// EventsStreamName for jobs of no tenant (events.<id>), EVENTS_<t> for
// t's (events.<t>.<id>), so that the consumers t creates to follow its
// jobs are on a stream of its own, whose cap they cannot take from anyone
// else (Topology.TenantMaxConsumers).
func EventsStreamOf(t string) string { return tenantBucket(EventsStreamName, t) }

// The job index: what the web console lists. RESULTS is a KV bucket, keyed
// by job ID; listing it means reading all of it, which a console of a
// fleet with 100,000 results cannot do per page view. So the workers also
// append small records to a stream of their own, INDEX, which a reader
// pages through by sequence (newest first) without ever reading RESULTS
// as a whole:
//
//	index.job.<queue>.<batch>.<id>  a JobSummary: written once a worker has
//	                                run the job for a moment (running: 250 ms,
//	                                internal/worker), and when its result is
//	                                stored (finished)
//	index.spec.<id>                 a JobSpec: the job's code and files, capped,
//	                                so that its page can show them once the
//	                                job has left JOBS
//	index.dead.<id>                 a JobSummary of a job given up after
//	                                MaxDeliver (a dead letter)
//
// The stream keeps one message per subject (MaxMsgsPerSubject 1): a job's
// finished record replaces its running one, so every job is in the index
// once, at the sequence of its latest change. The queue and the batch are
// subject tokens, so the server filters by them; status, label and ID are
// filtered by the reader, within a bound on the sequences it scans. The
// index is a view: RESULTS stays the authority, and a record may be
// missing (a worker that dropped it under load, an older worker).
const (
	IndexStreamName    = "INDEX"
	IndexSubjectPrefix = "index."
)

// IndexJobSubject is the subject of a job's summary record.
func IndexJobSubject(queue, batch, id string) string {
	return IndexSubjectPrefix + "job." + queue + "." + batch + "." + id
}

// IndexSpecSubject is the subject of a job's spec record.
func IndexSpecSubject(id string) string { return IndexSubjectPrefix + "spec." + id }

// IndexDeadSubject is the subject of a dead letter's record.
func IndexDeadSubject(id string) string { return IndexSubjectPrefix + "dead." + id }

// Names of the workspace buckets, part of the wire contract.
const (
	WorkspacesBucket = "WORKSPACES" // KV: workspace name → WorkspaceHead
	SnapshotsBucket  = "SNAPSHOTS"  // objects: "<workspace>/<revision>.<take>" → tar
	ArtifactsBucket  = "ARTIFACTS"  // objects: "<job id>/<run>/<path>" → the file
)

// SnapshotsBucketOf is the object store of tenant t's snapshots:
// SnapshotsBucket for workspaces of no tenant, SNAPSHOTS_<t> for t's.
func SnapshotsBucketOf(t string) string { return tenantBucket(SnapshotsBucket, t) }

// ArtifactsBucketOf is the object store of the artifacts of tenant t's
// jobs: ArtifactsBucket for jobs of no tenant, ARTIFACTS_<t> for t's.
func ArtifactsBucketOf(t string) string { return tenantBucket(ArtifactsBucket, t) }

func tenantBucket(base, t string) string {
	if t == "" {
		return base
	}
	return base + "_" + t
}

// ArtifactTenant is the tenant of the job an artifact's key names (see
// ArtifactKey): whose object store holds it.
func ArtifactTenant(key string) string {
	job, _, _ := strings.Cut(key, "/")
	return TenantOf(job)
}

// SnapshotJobMeta is the metadata key of a snapshot naming the job that
// saved it, so that a workspace's kept revisions each say which job made
// them.
const SnapshotJobMeta = "job"

// SnapshotName is the object of a workspace's revision in SNAPSHOTS when
// its head names none (WorkspaceHead.Snapshot): the name of the snapshots
// saved before the heads named them.
func SnapshotName(workspace string, revision int64) string {
	return workspace + "/" + strconv.FormatInt(revision, 10)
}

// SaveName is the object a step that took the head as take saves revision
// revision to: its own, so that two live deliveries of one step (a lease
// that ran out while the first still ran) never write, nor delete, each
// other's snapshot.
func SaveName(workspace string, revision int64, take string) string {
	return SnapshotName(workspace, revision) + "." + take
}

// SessionWorkspace is the workspace a persistent session keeps its
// checkpoints in: "session=<id>", "<tenant>.session=<id>" for a tenant's.
// Its '=' is outside the names a job or a session may give a workspace
// (A-Z a-z 0-9 _ -), so no caller can name it: not to read it, write into
// it, start from it or hold a step on it. Only the session's worker writes
// it, and the head says whose it is (its owner).
func SessionWorkspace(tenant, session string) string {
	name := sessionWorkspacePrefix + session
	if tenant == "" {
		return name
	}
	return tenant + "." + name
}

const sessionWorkspacePrefix = "session="

// IsSessionWorkspace reports whether a workspace's name is a session's
// (SessionWorkspace): left out of every list of workspaces.
func IsSessionWorkspace(name string) bool {
	if t := TenantOf(name); t != "" {
		name = name[len(t)+1:]
	}
	return strings.HasPrefix(name, sessionWorkspacePrefix)
}

// ArtifactKey is the object of a job's artifact in ARTIFACTS, as one
// delivery of the job (run, a name of its own) stored it: two live
// deliveries of a job (a lease that ran out while the first still ran)
// never write over each other's files, and the stored result's keys name
// the files of the run that gave it.
func ArtifactKey(jobID, run, name string) string { return jobID + "/" + run + "/" + name }

// SnapshotSavedMeta is the metadata key of a snapshot put again (see
// SnapshotTTL) holding when it was first saved, RFC 3339.
const SnapshotSavedMeta = "saved"

// CancelRequest is the value a Cancel stores in CANCELS under the job ID.
// Workers watch the bucket and cancel the job's context when it is running.
type CancelRequest struct {
	RequestedAt time.Time `json:"requested_at"`
}

// CancelReason is the error text of a result canceled by request.
const CancelReason = "canceled by request"

// ValidTenant reports whether s may name a tenant: [a-z0-9][a-z0-9-]{0,31},
// lower-case, so that it can also name users and environment variables.
func ValidTenant(s string) bool {
	if len(s) == 0 || len(s) > 32 || !lowerOrDigit(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !lowerOrDigit(s[i]) && s[i] != '-' {
			return false
		}
	}
	return true
}

// TenantOf returns the tenant of a job ID or of a workspace's name, ""
// for one of no tenant.
func TenantOf(id string) string {
	t, _, ok := strings.Cut(id, ".")
	if !ok {
		return ""
	}
	return t
}

// ValidID reports whether s may be used as a job ID: [A-Za-z0-9_-]{1,128},
// qualified by a tenant's name and a dot for a tenant's job
// (`^(?:[a-z0-9][a-z0-9-]{0,31}\.)?[A-Za-z0-9_-]{1,128}$`). Every message
// is checked on its way in and out, so it is written out rather than a
// regular expression's backtracking (TestNamesMatchTheirPatterns holds it
// to the pattern).
func ValidID(s string) bool {
	if t, id, ok := strings.Cut(s, "."); ok {
		return ValidTenant(t) && plainName(id, 128)
	}
	return plainName(s, 128)
}

// ValidQueue reports whether s may be used as a queue name:
// [A-Za-z0-9_-]{1,64}.
func ValidQueue(s string) bool { return plainName(s, 64) }

// plainName reports whether s is 1 to limit bytes of [A-Za-z0-9_-].
func plainName(s string, limit int) bool {
	if len(s) == 0 || len(s) > limit {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !lowerOrDigit(c) && !('A' <= c && c <= 'Z') && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func lowerOrDigit(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }
