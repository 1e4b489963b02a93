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
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
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

// The operations a session's owner answers (the last token of Subject).
const (
	OpInfo      = "info"
	OpDelete    = "delete"
	OpKeepalive = "keepalive"
	OpExec      = "exec"
	OpCode      = "code"
	OpReset     = "reset"
	OpProcesses = "processes"
	OpProcess   = "process" // wait for or read a background process
	OpSignal    = "signal"
	OpStdin     = "stdin"
	OpRead      = "read"
	OpWrite     = "write"
	OpList      = "list"
	OpStat      = "stat"
	OpRemove    = "remove"
	OpMkdir     = "mkdir"
	OpRename    = "rename"
	// OpPause checkpoints a persistent session and frees its sandbox.
	OpPause = "pause"
	// OpCheckpoint checkpoints a persistent session now (what Fork asks
	// of its source first).
	OpCheckpoint = "checkpoint"
	// OpNetwork replaces the session's egress policy (limits.network)
	// while it runs, within the worker's caps: "none" locks it.
	OpNetwork = "network"
)

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

// ExecRequest runs a command: Cmd (an argv) or Shell (run by /bin/sh -c).
//
// Exclusive runs it with no other process of the session alive: every
// one (background processes, terminals' shells, code contexts, whatever
// they left) is killed first, and none may start until the command ends.
// Nothing but the command and its own descendants can then write into
// its output or touch its exit code, which a session's own processes
// otherwise can (they run as the same user): use it to run a verifier
// whose verdict grades the session's work. Not with Background.
type ExecRequest struct {
	Cmd        []string          `json:"cmd,omitempty"`
	Shell      string            `json:"shell,omitempty"`
	Cwd        string            `json:"cwd,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Stdin      string            `json:"stdin,omitempty"`
	Timeout    limits.Duration   `json:"timeout,omitempty"` // default the session's limits.timeout
	Background bool              `json:"background,omitempty"`
	Exclusive  bool              `json:"exclusive,omitempty"`
}

// ExecResult is a command's end, or a background command's PID.
type ExecResult struct {
	PID             int    `json:"pid,omitempty"`
	ExitCode        *int   `json:"exit_code,omitempty"`
	Signal          int    `json:"signal,omitempty"`
	TimedOut        bool   `json:"timed_out,omitempty"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutEncoding  string `json:"stdout_encoding,omitempty"` // "base64" when not UTF-8
	StderrEncoding  string `json:"stderr_encoding,omitempty"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	DurationMS      int64  `json:"duration_ms"`
	// Exclusive says the command ran alone, Ended how many processes of
	// the session were killed before it started.
	Exclusive bool `json:"exclusive,omitempty"`
	Ended     int  `json:"ended,omitempty"`
}

// CodeRequest runs a cell in a stateful context. Language is python
// (the default), javascript, typescript or bash; a context keeps the
// language it started with. Context defaults to "default" for python and
// to the language's name for the others.
type CodeRequest struct {
	Code     string          `json:"code"`
	Context  string          `json:"context,omitempty"`
	Language string          `json:"language,omitempty"`
	Timeout  limits.Duration `json:"timeout,omitempty"` // default the session's limits.timeout
}

// CodeResult is a cell's end: the value of its trailing expression as
// text, what it printed, and what it raised.
type CodeResult struct {
	// Language is the context's; ExitCode a bash cell's status (its last
	// command's), an error too when not 0.
	Language       string     `json:"language,omitempty"`
	ExitCode       *int       `json:"exit_code,omitempty"`
	Text           string     `json:"text,omitempty"`
	Stdout         string     `json:"stdout"`
	Stderr         string     `json:"stderr"`
	StdoutEncoding string     `json:"stdout_encoding,omitempty"`
	StderrEncoding string     `json:"stderr_encoding,omitempty"`
	Error          *CodeError `json:"error,omitempty"`
	// Reset is true when the context was started afresh for this cell:
	// its first, or after its interpreter died or was reset.
	Reset      bool  `json:"reset,omitempty"`
	TimedOut   bool  `json:"timed_out,omitempty"`
	DurationMS int64 `json:"duration_ms"`
	// Display are the cell's display outputs, as a job's result has them
	// (the figures it showed or left open, with the python-data preset),
	// and DisplayDropped those past the bounds or of a type not shown.
	Display        []jobs.Display `json:"display,omitempty"`
	DisplayDropped int            `json:"display_dropped,omitempty"`
}

// CodeError is what a cell raised.
type CodeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// Process is a background process of a session.
type Process struct {
	PID      int      `json:"pid"`
	Cmd      []string `json:"cmd"`
	Running  bool     `json:"running"`
	ExitCode *int     `json:"exit_code,omitempty"`
	Signal   int      `json:"signal,omitempty"`
	Started  int64    `json:"started_ms"`
	// OutputBytes is the offset its output has reached.
	OutputBytes int64 `json:"output_bytes"`
}

// ProcessRequest reads a background process: its output since Since,
// after waiting up to Wait for it to end.
type ProcessRequest struct {
	PID   int             `json:"pid"`
	Since int64           `json:"since,omitempty"`
	Wait  limits.Duration `json:"wait,omitempty"`
}

// ProcessOutput is what ProcessRequest returns. An ended process read
// with a wait is collected: it is no longer listed.
type ProcessOutput struct {
	PID      int    `json:"pid"`
	Running  bool   `json:"running"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   int    `json:"signal,omitempty"`
	Output   string `json:"output"`
	Encoding string `json:"output_encoding,omitempty"`
	Next     int64  `json:"next"`
	Dropped  int64  `json:"dropped,omitempty"` // bytes before Since no longer kept
}

// SignalRequest signals a background process's group.
type SignalRequest struct {
	PID    int `json:"pid"`
	Signal int `json:"signal,omitempty"` // default SIGTERM
}

// StdinRequest writes to a background process's stdin.
type StdinRequest struct {
	PID  int    `json:"pid"`
	Data []byte `json:"data,omitempty"`
	EOF  bool   `json:"eof,omitempty"`
}

// FileRequest names a file, for read, write, list, stat, remove, mkdir
// and rename.
type FileRequest struct {
	Path      string `json:"path"`
	To        string `json:"to,omitempty"`
	Data      []byte `json:"data,omitempty"`
	Offset    int64  `json:"offset,omitempty"`
	Length    int64  `json:"length,omitempty"`
	Append    bool   `json:"append,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
}

// FileResult is a file call's answer.
type FileResult struct {
	Data    []byte  `json:"data,omitempty"`
	EOF     bool    `json:"eof,omitempty"`
	Entry   *Entry  `json:"entry,omitempty"`
	Entries []Entry `json:"entries,omitempty"`
}

// Entry is a file of a session.
type Entry struct {
	Name    string `json:"name"`
	Path    string `json:"path"`
	Type    string `json:"type"` // file, dir, symlink, other
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"`
	MTimeMS int64  `json:"mtime_ms"`
	Target  string `json:"target,omitempty"`
}

// MaxFileChunk is the most bytes one read or write call carries: a larger
// file takes several (the Client's ReadFile and WriteFile do).
const MaxFileChunk = 512 << 10

// MaxReplyOutput is the most bytes of each stream a call's reply carries.
const MaxReplyOutput = 256 << 10

// Error is a failed call: a stable code and a message.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Cap names the cap an ErrCap is over (CapPerToken, ...).
	Cap string `json:"cap,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("session: %s: %s", e.Code, e.Message) }

// Is makes errors.Is(err, ErrNotFound) and the like true for an Error of
// that code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Code == e.Code
}

// The codes of Error, as sentinels for errors.Is.
var (
	ErrNotFound = &Error{Code: "not_found"} // no such session (or not the caller's), file or process
	ErrGone     = &Error{Code: "gone"}      // the session has ended; its Info says why
	ErrFull     = &Error{Code: "full"}      // no worker has room for another session
	ErrInvalid  = &Error{Code: "invalid"}   // a bad request
	ErrLimit    = &Error{Code: "limit"}     // over a bound of the session
	ErrExists   = &Error{Code: "exists"}    // the path exists already
	ErrFailed   = &Error{Code: "failed"}    // the call failed in the sandbox
	ErrPaused   = &Error{Code: "paused"}    // the session is paused: resume it first
	ErrCap      = &Error{Code: "cap"}       // over a cap of the fleet's on what a caller may hold or ask (Error.Cap names it)
)

// The caps an ErrCap names (Error.Cap): the live sessions (running or
// resuming) one token, or all the tokens of one tenant, hold; the most a
// create may ask for max_lifetime and idle_timeout. The operator sets
// them on the workers (cmd/worker's --session-max-* flags).
const (
	CapPerToken    = "sessions_per_token"
	CapPerTenant   = "sessions_per_tenant"
	CapMaxLifetime = "max_lifetime"
	CapIdleTimeout = "idle_timeout"
)

// CapErrorf returns an ErrCap naming cap.
func CapErrorf(cap, format string, args ...any) *Error {
	return &Error{Code: ErrCap.Code, Cap: cap, Message: fmt.Sprintf(format, args...)}
}

// Errorf returns an Error of sentinel's code.
func Errorf(sentinel *Error, format string, args ...any) *Error {
	return &Error{Code: sentinel.Code, Message: fmt.Sprintf(format, args...)}
}

// AsError returns err's *Error, or nil.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// Text returns b as JSON carries it: itself when UTF-8, else base64 and
// the encoding's name.
func Text(b []byte) (text, encoding string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}
