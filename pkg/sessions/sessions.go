// Package sessions is the fleet's long-lived sandboxes: a session is one
// hardened sandbox (the same preset, limits, seccomp profile and runtime
// as a job's) held by one worker for one owner, from its create to its
// delete, idle timeout or maximum lifetime, and addressed across many
// calls: commands, background processes, stateful Python contexts and
// files.
//
// A create goes to any worker with room: workers that have a free session
// slot listen on SubjectCreate in one queue group, so NATS hands the
// request to one of them, and a create that finds none is answered at
// once (ErrFull) rather than queued. The worker that takes it owns the
// session: it answers the session's subjects (Subject(id, op)) for as
// long as it lives, and records it in the SESSIONS bucket (Info), which
// is what a list, a lookup and the reason of an ended session read. Calls
// never poll: each is one NATS request to the owner.
//
// A session ends when it is deleted, idle for its idle timeout, at its
// maximum lifetime, or when its worker is lost: the sandbox's agent ends
// it by itself when the worker stops renewing it, so that no sandbox
// outlives its worker by more than a few seconds (see internal/executor
// SessionSpec.Deadman). Its record then says why (Info.EndReason).
package sessions

import (
	"regexp"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// SubjectCreate is where creates go; workers with room listen on it in
// QueueGroup.
const (
	SubjectCreate = "sandfleet.sessions.create"
	QueueGroup    = "sandfleet-session-workers"
	subjectPrefix = "sandfleet.session."
	// Bucket is the KV bucket of the sessions' records (Info), by ID.
	Bucket = "SESSIONS"
)

// Subject is the subject of operation op on session id.
func Subject(id, op string) string { return subjectPrefix + id + "." + op }

var idRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidID reports whether id can name a session.
func ValidID(id string) bool { return idRE.MatchString(id) }

// Statuses of a session.
const (
	StatusRunning = "running"
	// StatusPaused: a persistent session whose sandbox was freed after a
	// checkpoint; Client.Resume starts it again, on any worker.
	StatusPaused = "paused"
	// StatusResuming: a worker is starting the session again from its
	// checkpoint (Info.Worker names it).
	StatusResuming = "resuming"
	StatusEnded    = "ended"
)

// Reasons a session ended (Info.EndReason).
const (
	EndDeleted  = "deleted"
	EndIdle     = "idle"
	EndLifetime = "lifetime"
	EndLost     = "lost"     // its worker was lost, or its sandbox ended by itself
	EndShutdown = "shutdown" // its worker stopped
)

// Defaults of a session's lifetimes.
const (
	DefaultIdleTimeout = 5 * time.Minute
	DefaultMaxLifetime = time.Hour
)

// Spec is what a create asks for.
type Spec struct {
	Image       string            `json:"image,omitempty"` // a preset; default "python"
	Limits      limits.Limits     `json:"limits,omitzero"`
	Env         map[string]string `json:"env,omitempty"`
	Files       map[string]string `json:"files,omitempty"`
	IdleTimeout limits.Duration   `json:"idle_timeout,omitempty"`
	MaxLifetime limits.Duration   `json:"max_lifetime,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`

	// Persist keeps the session's /workspace in a workspace (Workspace,
	// a workspace of the tenant's that its jobs may name too, else the
	// session's own, which no one else names, reads or lists): restored
	// from its head at the start, checkpointed into it at idle points and
	// on pause and delete, so that the session outlives its sandbox and
	// its worker.
	Persist   bool   `json:"persist,omitempty"`
	Workspace string `json:"workspace,omitempty"`
	// WorkspaceFrom starts the session from a revision of another
	// workspace, as a job's does; with Persist, its checkpoints go to
	// its own workspace.
	WorkspaceFrom *jobs.WorkspaceRef `json:"workspace_from,omitempty"`
	// Tenant qualifies the workspaces named: the gateway sets it from
	// the token, whatever the body said.
	Tenant string `json:"tenant,omitempty"`
	// From is set by Client.Resume and Client.Fork, never by a create of
	// the API (the gateway refuses it).
	From *From `json:"from,omitempty"`
}

// From starts a session from another's checkpoint: the same session
// again (Resume), or a new one (a fork).
type From struct {
	Session string `json:"session"`
	Resume  bool   `json:"resume,omitempty"`
	// Persist, for a fork, keeps its checkpoints in a workspace of its
	// own (default: as its source).
	Persist *bool `json:"persist,omitempty"`
}

// ForkRequest is what a fork asks for besides its source.
type ForkRequest struct {
	Persist *bool             `json:"persist,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// Checkpoint is a persistent session's last checkpoint: a revision of its
// workspace.
type Checkpoint struct {
	Revision  int64     `json:"revision"`
	At        time.Time `json:"at"`
	SizeBytes int64     `json:"size_bytes"`
	Files     int       `json:"files"`
}

// Restored says that a session's sandbox was started again from a
// checkpoint (its worker was lost, or it was paused): its files are the
// checkpoint's, its processes and interpreters' memory are gone, and each
// code context starts afresh (its first cell says reset).
type Restored struct {
	Revision int64     `json:"revision"`
	At       time.Time `json:"at"`
	// Why: "lost" (its worker stopped answering), "paused" (a resume).
	Why string `json:"why"`
}

// Info is a session's record.
type Info struct {
	ID          string            `json:"id"`
	Status      string            `json:"status"`
	Owner       string            `json:"owner,omitempty"` // the token that made it
	Worker      string            `json:"worker"`
	Image       string            `json:"image"`
	ImageDigest string            `json:"image_digest,omitempty"`
	Limits      limits.Limits     `json:"limits"`
	IdleTimeout limits.Duration   `json:"idle_timeout"`
	MaxLifetime limits.Duration   `json:"max_lifetime"`
	CreatedAt   time.Time         `json:"created_at"`
	ActiveAt    time.Time         `json:"active_at"`  // the last call
	ExpiresAt   time.Time         `json:"expires_at"` // its maximum lifetime's end
	EndedAt     *time.Time        `json:"ended_at,omitempty"`
	EndReason   string            `json:"end_reason,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	// Ports are the ports of its sandbox's loopback it exposes (Expose).
	Ports []int `json:"ports,omitempty"`
	// Exposures counts the exposes of a port not exposed, over the
	// session's life; PortExposure is the number of each exposed port's
	// exposure. A preview token names the exposure it was made for, so
	// one made before an unexpose is refused once the port is exposed
	// again.
	Exposures    int         `json:"exposures,omitempty"`
	PortExposure map[int]int `json:"port_exposure,omitempty"`

	// A persistent session's (Spec.Persist): its workspace, its last
	// checkpoint, and, when its sandbox was started again, from what.
	Persist    bool        `json:"persist,omitempty"`
	Workspace  string      `json:"workspace,omitempty"`
	Tenant     string      `json:"tenant,omitempty"`
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	Restored   *Restored   `json:"restored,omitempty"`
	ForkedFrom string      `json:"forked_from,omitempty"`
	PausedAt   *time.Time  `json:"paused_at,omitempty"`
	// Env is kept for a resume, which starts the sandbox with it again.
	Env map[string]string `json:"env,omitempty"`
	// Egress is what the session's sandbox carried through the egress
	// proxy so far, per destination and verdict (as a job's result has
	// it); only in the live answer of its worker, omitted without a
	// network.
	Egress []limits.NetworkUse `json:"egress,omitempty"`
}

// CodeResult is a cell's end: the value of its trailing expression as
// text, what it printed, and what it raised.
type CodeResult = sessionapi.CodeResult
