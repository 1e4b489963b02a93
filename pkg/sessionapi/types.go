package sessionapi

import (
	"encoding/base64"
	"unicode/utf8"

	"github.com/sandfleet/sandfleet/pkg/limits"
)

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

// ContextRequest starts a code context (OpContext): Language as a
// CodeRequest's, Cwd its working directory (the session's by default,
// inside its tree), Name its name (by default the one a cell of the
// language uses when free, else the language's name and a number). A
// name taken already is ErrExists; a session keeps at most MaxContexts.
// OpEndContext takes Name alone.
type ContextRequest struct {
	Name     string `json:"name,omitempty"`
	Language string `json:"language,omitempty"`
	Cwd      string `json:"cwd,omitempty"`
}

// Context is a code context of a session: Cwd is its process's working
// directory now (a shell's cd moves it), Cells how many cells it ran
// since it started, Created when (Unix milliseconds).
type Context struct {
	Name     string `json:"name"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
	Cells    int    `json:"cells"`
	Created  int64  `json:"created_ms"`
}

// MaxContexts bounds the code contexts of a session.
const MaxContexts = 16

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

// Text returns b as JSON carries it: itself when UTF-8, else base64 and
// the encoding's name.
func Text(b []byte) (text, encoding string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}
