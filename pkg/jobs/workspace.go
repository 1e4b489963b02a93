package jobs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sandfleet/sandfleet/internal/field"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/shorten"
)

// Workspaces: an agent's state across jobs, kept in JetStream. Workers stay
// stateless and sandboxes single-use: a job naming a workspace has its
// latest snapshot (a tar of the working directory, written by the sandbox's
// launcher) restored before it runs, and the directory after it becomes
// the workspace's next revision. Snapshots are objects of the SNAPSHOTS
// object store, named "<workspace>/<revision>.<take>" (internal/fleet's SaveName; the head
// names them); the head of each workspace
// is a key of the WORKSPACES bucket, updated only by compare-and-swap (see
// WorkspaceHead and internal/worker's workspace.go for the rules). Artifacts,
// the files a job's outputs name, are objects of ARTIFACTS named
// "<job id>/<run>/<path>". A tenant's workspaces are named <tenant>.<name> and
// its snapshots and artifacts live in object stores of its own,
// SNAPSHOTS_<tenant> and ARTIFACTS_<tenant> (see tenant.go).

// WorkspaceRef names a workspace's revision; Revision 0 means its head.
type WorkspaceRef struct {
	Name     string `json:"name"`
	Revision int64  `json:"revision,omitempty"`
}

func (r WorkspaceRef) String() string {
	if r.Revision == 0 {
		return r.Name
	}
	return r.Name + "@" + strconv.FormatInt(r.Revision, 10)
}

// ParseWorkspaceRef reads NAME or NAME@REVISION.
func ParseWorkspaceRef(s string) (WorkspaceRef, error) {
	name, rev, found := cutLast(s, '@')
	r := WorkspaceRef{Name: name}
	if found {
		n, err := strconv.ParseInt(rev, 10, 64)
		if err != nil || n < 1 {
			return r, fmt.Errorf("%w: workspace_from: revision %q must be a number from 1", ErrInvalidJob, rev)
		}
		r.Revision = n
	}
	if err := checkWorkspaceName("workspace_from.name", r.Name); err != nil {
		return r, fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	return r, nil
}

// checkWorkspaceName checks a workspace's name: NAME, or <tenant>.NAME for
// a tenant's, NAME as field.Name says, so that it is a KV key of one or
// two subject tokens and an object name prefix as it is.
func checkWorkspaceName(at, name string) error {
	t, rest, qualified := strings.Cut(name, ".")
	if !qualified {
		return field.Name(at, name)
	}
	if !ValidTenant(t) || field.Name(at, rest) != nil {
		return &field.Error{Field: at, Reason: fmt.Sprintf("%s must be 1 to %d of A-Z a-z 0-9 _ -, or <tenant>.<that> (a tenant [a-z0-9][a-z0-9-]{0,31})",
			field.Quote(shorten.Text(name, 170)), field.MaxNameBytes)}
	}
	return nil
}

func cutLast(s string, sep byte) (before, after string, found bool) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// validateWorkspace checks the job's workspace fields, and that it names
// only workspaces of its own tenant (the tenant of its ID: the worker's
// check, with the subject's ID, whatever the publisher's client did).
func (j *Job) validateWorkspace() error {
	if j.Workspace != "" {
		if err := checkWorkspaceName("workspace", j.Workspace); err != nil {
			return err
		}
		if err := ownWorkspace(j.ID, "workspace", j.Workspace); err != nil {
			return err
		}
	}
	if f := j.WorkspaceFrom; f != nil {
		if err := checkWorkspaceName("workspace_from.name", f.Name); err != nil {
			return err
		}
		if err := ownWorkspace(j.ID, "workspace_from.name", f.Name); err != nil {
			return err
		}
		switch {
		case f.Revision < 0:
			return &field.Error{Field: "workspace_from.revision", Reason: "must be 0 (the head) or more"}
		case f.Name == j.Workspace:
			return &field.Error{Field: "workspace_from", Reason: "a workspace cannot start from itself (leave workspace_from out)"}
		}
	}
	return field.Outputs(j.Outputs)
}

// WorkspaceStep is what a job did in its workspace, in its Result.
type WorkspaceStep struct {
	// Name is the job's workspace; "" for a copy (workspace_from alone).
	Name string `json:"name,omitempty"`
	// From is the state the job started from: a revision of its own
	// workspace (0: it was empty), or the workspace it was forked from.
	From WorkspaceRef `json:"from"`
	// Revision is the revision the job produced; From.Revision of its own
	// workspace when nothing was saved (see Error).
	Revision  int64 `json:"revision"`
	SizeBytes int64 `json:"size_bytes,omitempty"` // the snapshot's size (a tar)
	Files     int   `json:"files,omitempty"`      // entries: files, directories, links
	// Skipped lists what the snapshot could not keep, with the reason:
	// fifos, sockets, devices, links leading out of the workspace, names
	// the restore would refuse (a path over 255 bytes), unreadable files.
	// A directory left out for its name is listed once, with the count of
	// what it held. The first ones only: SkippedMore counts the others.
	Skipped     []SkippedEntry `json:"skipped,omitempty"`
	SkippedMore int            `json:"skipped_more,omitempty"`
	// Replayed is set on a redelivered job whose first attempt had already
	// saved its revision: it ran again against the same state, and the
	// revision stands as the first attempt saved it.
	Replayed bool `json:"replayed,omitempty"`
	// Error says why the job's changes were not saved.
	Error string `json:"error,omitempty"`
}

// SkippedEntry is an entry of the working directory a snapshot or the
// outputs left out, and why.
type SkippedEntry struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// UnmarshalJSON also reads a step stored by a worker that counted what it
// skipped without naming it ("skipped": 3): the count goes to SkippedMore.
func (s *WorkspaceStep) UnmarshalJSON(data []byte) error {
	type plain WorkspaceStep
	var v struct {
		plain
		Skipped json.RawMessage `json:"skipped,omitempty"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*s = WorkspaceStep(v.plain)
	switch raw := bytes.TrimSpace(v.Skipped); {
	case len(raw) == 0 || string(raw) == "null":
	case raw[0] == '[':
		return json.Unmarshal(raw, &s.Skipped)
	default:
		var n int
		if err := json.Unmarshal(raw, &n); err != nil {
			return fmt.Errorf("workspace.skipped: %w", err)
		}
		s.SkippedMore += n
	}
	return nil
}

// Artifact is a file a job returned: in ARTIFACTS under Key.
type Artifact struct {
	Name   string `json:"name"` // path under the working directory
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Key    string `json:"key"`
}

// SkippedArtifact is a file matching the job's outputs that was not kept.
type SkippedArtifact struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	Reason string `json:"reason"`
}

// StepState is the state of the step in flight on a workspace.
type StepState string

const (
	// StepRunning: the job holds the workspace and runs; its revision is
	// not saved.
	StepRunning StepState = "running"
	// StepSaved: the job's revision is saved and is the head, but its
	// result is not stored yet. A redelivery of the same job runs it again
	// against Base, saves nothing, and reports the same revision.
	StepSaved StepState = "saved"
)

// InFlight is the step holding a workspace: one at a time.
type InFlight struct {
	Job    string       `json:"job"`
	State  StepState    `json:"state"`
	Base   WorkspaceRef `json:"base"` // the state it started from, with its revision
	Worker string       `json:"worker"`
	Since  time.Time    `json:"since"`
	// Lease names this hold of the head: a delivery of the same job
	// holds the step anew under a lease of its own, and only the latest
	// holder saves. ("take" on the wire, as workers already write it.)
	Lease string `json:"take,omitempty"`
}

// WorkspaceHead is the value of a workspace's key in WORKSPACES.
type WorkspaceHead struct {
	Name string `json:"name"`
	// Revision is the latest saved revision: 0 while the workspace is
	// empty. Its snapshot is Snapshot(Revision).
	Revision  int64         `json:"revision"`
	SizeBytes int64         `json:"size_bytes"`
	Files     int           `json:"files"`
	SHA256    string        `json:"sha256,omitempty"`
	Job       string        `json:"job,omitempty"` // the job that saved Revision
	Forked    *WorkspaceRef `json:"forked_from,omitempty"`
	// Kept lists the revisions whose snapshots are kept, oldest first; a
	// fork may start from any of them.
	Kept []int64 `json:"kept,omitempty"`
	// Snapshots names the object of each kept revision; one it leaves out
	// is at "<workspace>/<revision>". Use Snapshot.
	Snapshots map[int64]string `json:"snapshots,omitempty"`
	UpdatedAt time.Time        `json:"updated_at"`
	// Step is the step in flight, if any.
	Step *InFlight `json:"step,omitempty"`
	// Owner is, for a persistent session's checkpoints (a workspace no
	// job names: fleet.SessionWorkspace), the session's owner, the only
	// one whose session restores it or forks from it. Empty for a
	// workspace of jobs, which every caller of its tenant may name.
	Owner string `json:"owner,omitempty"`
}

// Snapshot returns the object in SNAPSHOTS of revision rev's snapshot.
func (h *WorkspaceHead) Snapshot(rev int64) string {
	if name, ok := h.Snapshots[rev]; ok {
		return name
	}
	return fleet.SnapshotName(h.Name, rev)
}
