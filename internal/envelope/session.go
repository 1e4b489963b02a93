package envelope

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// A session's launcher is an agent: after the envelope (and a workspace's
// snapshot) it runs nothing by itself, and reads requests from the
// container's stdin instead, until the executor closes the session or
// stops renewing it. Requests and replies are framed like the rest (see
// frame.go); a message longer than one frame is cut into parts, each
// naming its request, so that the replies of concurrent requests may
// interleave:
//
//	stdin   'q' id+piece ... 'Q' id+last piece      one Request, JSON
//	stdout  'p' id+piece ... 's' id+last piece      one Reply, JSON, a space and its MAC
//	stdout  'v' JSON, a space and its MAC           an Event: live output
//
// Every reply and event is signed with the envelope's key, as a job's
// trailer is: the session's processes never hold the container's streams,
// and the MAC makes sure that nothing they write can pass for the agent's
// word even if they did. A session ends with a signed trailer saying why
// (Trailer.Error: "closed", "idle", "lifetime").
const (
	FrameRequestPart byte = 'q'
	FrameRequest     byte = 'Q'
	FrameReplyPart   byte = 'p'
	FrameReply       byte = 's'
	FrameEvent       byte = 'v'
)

// MaxMessageBytes bounds one request or reply, all its parts together.
const MaxMessageBytes = 16 << 20

// Session is a session's part of the header: with it the launcher is the
// session's agent.
type Session struct {
	// Deadman is how long the agent goes on without a request (the
	// executor pings while it holds the session): past it, the agent
	// ends every process and exits, so that a session whose worker died
	// ends by itself.
	DeadmanMS int64 `json:"deadman_ms"`
	// LifetimeMS ends the session that long after it started, whatever
	// it is doing.
	LifetimeMS int64 `json:"lifetime_ms"`
	// OutputLimit bounds what a command's reply carries of each stream,
	// and what is kept of a background process's output (its last bytes).
	OutputLimit int64 `json:"output_limit"`
	// MaxProcesses bounds the background processes the agent keeps
	// track of at once (running or exited and not yet collected).
	MaxProcesses int `json:"max_processes"`
	// Runtime is the sandbox's OCI runtime ("runsc" for gVisor), for what
	// the agent does differently there: a terminal's shell edits lines
	// with the pty's own discipline, since readline's terminal setup
	// makes gVisor's pty report an end of file.
	Runtime string `json:"runtime,omitempty"`
}

func (s *Session) validate() error {
	if s.DeadmanMS <= 0 || s.LifetimeMS <= 0 || s.OutputLimit <= 0 || s.MaxProcesses <= 0 {
		return errorf("session: deadman_ms, lifetime_ms, output_limit and max_processes must be positive")
	}
	return nil
}

// The operations of a session's agent: those of the session it serves
// (sessionapi.OpExec, OpCode, OpReset, OpProcesses, OpSignal, OpStdin and
// the files', IsFileOp), asked by the same names, and these, which only
// the executor asks.
const (
	OpPing   = "ping"   // renew the deadman; nothing else
	OpWait   = "wait"   // wait up to TimeoutMS for a background process to end
	OpOutput = "output" // a background process's output since Since
	OpClose  = "close"  // end every process, send the trailer and exit
	// OpArchive archives the working directory while the session lives
	// (a checkpoint): every other process is stopped (SIGSTOP) while it is
	// read, and continued after. The tar goes out as FrameArchive frames
	// before the reply, which gives its size and digest, signed. One at a
	// time.
	OpArchive = "archive"
)

// Request is one call of the executor on the agent.
type Request struct {
	ID uint64 `json:"id"`
	Op string `json:"op"`

	// exec: Argv, or Shell run by /bin/sh -c; Cwd (default the working
	// directory), Env over the session's, Stdin, TimeoutMS (0: none for a
	// background process, the session's limit otherwise). Exclusive
	// ends every other process of the sandbox first (its background
	// processes, terminals and contexts included) and lets none start
	// until the command has ended, so that nothing but the command and
	// its own descendants can reach its output or status; not with
	// Background. A reply to it says Exclusive: an agent that does not
	// know the field ignores it, and its reply does not.
	Exclusive  bool              `json:"exclusive,omitempty"`
	Argv       []string          `json:"argv,omitempty"`
	Shell      string            `json:"shell,omitempty"`
	Cwd        string            `json:"cwd,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Stdin      []byte            `json:"stdin,omitempty"`
	TimeoutMS  int64             `json:"timeout_ms,omitempty"`
	Background bool              `json:"background,omitempty"`

	// processes, wait, output, signal, stdin.
	PID    int   `json:"pid,omitempty"`
	Signal int   `json:"signal,omitempty"`
	Since  int64 `json:"since,omitempty"`
	EOF    bool  `json:"eof,omitempty"`

	// code, reset: the context's name and language: python (the
	// default), javascript, typescript or bash. The name defaults to
	// "default" for python and the language's name for the others.
	// context (sessionapi.OpContext) starts one in Cwd; endcontext ends
	// the one Context names.
	Context  string `json:"context,omitempty"`
	Language string `json:"language,omitempty"`
	Code     string `json:"code,omitempty"`

	// Files.
	Path      string `json:"path,omitempty"`
	To        string `json:"to,omitempty"`
	Data      []byte `json:"data,omitempty"`
	Offset    int64  `json:"offset,omitempty"`
	Length    int64  `json:"length,omitempty"`
	Append    bool   `json:"append,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`

	// archive: the bounds of the archive (internal/archive's Limits).
	MaxBytes int64 `json:"max_bytes,omitempty"`
	MaxFiles int   `json:"max_files,omitempty"`

	// Terminals (see OpPTYOpen): PTY names one; Cols and Rows size it;
	// Acked is how much of its output the far end has taken, in all.
	PTY   int   `json:"pty,omitempty"`
	Cols  int   `json:"cols,omitempty"`
	Rows  int   `json:"rows,omitempty"`
	Acked int64 `json:"acked,omitempty"`

	// Connections (see OpConnOpen): Port to open one, Conn to name it;
	// Data, Acked and EOF as a terminal's.
	Port int `json:"port,omitempty"`
	Conn int `json:"conn,omitempty"`
}

// Reply answers one Request. Error is set when the call failed (with one
// of the codes the agent answers, sessionapi.Errorf); the rest is the
// operation's.
type Reply struct {
	ID    uint64            `json:"id"`
	Error *sessionapi.Error `json:"error,omitempty"`

	// exec (foreground), wait.
	Exit       *int   `json:"exit_code,omitempty"`
	Signal     int    `json:"signal,omitempty"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
	Stdout     []byte `json:"stdout,omitempty"`
	Stderr     []byte `json:"stderr,omitempty"`
	// StdoutBytes and StderrBytes count all the command wrote, of which
	// Stdout and Stderr are the first OutputLimit bytes.
	StdoutBytes int64 `json:"stdout_bytes,omitempty"`
	StderrBytes int64 `json:"stderr_bytes,omitempty"`
	// An exclusive exec's: that it ran alone, and how many processes
	// of the session it ended first.
	Exclusive bool `json:"exclusive,omitempty"`
	Ended     int  `json:"ended,omitempty"`

	// exec (background).
	PID int `json:"pid,omitempty"`
	// processes.
	Processes []sessionapi.Process `json:"processes,omitempty"`
	// output: the bytes since the request's Since (Stdout and Stderr as
	// one stream, in order), and Next, the offset to ask from next;
	// Dropped is how many bytes before Since... were no longer kept.
	Output  []byte `json:"output,omitempty"`
	Next    int64  `json:"next,omitempty"`
	Dropped int64  `json:"dropped,omitempty"`
	Running bool   `json:"running,omitempty"`

	// code: the value of a trailing expression as text, what the cell
	// printed, and the error it raised. Reset is true when the context
	// was started afresh for this call (first use, or it had died).
	// Language is the context's (an agent before the field: python); a
	// bash cell's status is Exit, and an error when it is not 0.
	Text      string                `json:"text,omitempty"`
	CodeError *sessionapi.CodeError `json:"code_error,omitempty"`
	Reset     bool                  `json:"reset,omitempty"`
	Language  string                `json:"language,omitempty"`
	// The cell's display outputs (see DisplayDir) and how many were
	// dropped at the bounds.
	Display        []DisplayItem `json:"display,omitempty"`
	DisplayDropped int           `json:"display_dropped,omitempty"`

	// contexts: the session's code contexts; context: the one started.
	Contexts []sessionapi.Context `json:"contexts,omitempty"`

	// Files.
	Data    []byte             `json:"data,omitempty"`
	EOF     bool               `json:"eof,omitempty"`
	Entries []sessionapi.Entry `json:"entries,omitempty"`
	Entry   *sessionapi.Entry  `json:"entry,omitempty"`

	// archive: what the FrameArchive frames before this reply held.
	Archive *ArchiveReport `json:"archive,omitempty"`

	// pty_open: the terminal's number, and its shell's process.
	PTY int `json:"pty,omitempty"`
	// conn_open: the connection's number.
	Conn int `json:"conn,omitempty"`
}

// ArchiveReport is what an OpArchive framed: its size and SHA-256 (which
// the executor checks against the frames it got), its entries and what
// it left out (see internal/archive's Stats).
type ArchiveReport struct {
	Bytes   int64  `json:"bytes"`
	SHA256  string `json:"sha256"`
	Files   int    `json:"files"`
	Skipped int    `json:"skipped,omitempty"`
}

// Event is live output of a command: Stream is "stdout" or "stderr".
type Event struct {
	ID     uint64 `json:"id"`  // the request that started the command
	PID    int    `json:"pid"` // its process
	Stream string `json:"stream"`
	Data   []byte `json:"data"`

	// A terminal's output (Stream StreamPTY) and end (StreamPTYExit).
	PTY    int  `json:"pty,omitempty"`
	Exit   *int `json:"exit_code,omitempty"`
	Signal int  `json:"signal,omitempty"`
	// A connection's bytes (Stream StreamConn) and end (StreamConnEnd).
	Conn int `json:"conn,omitempty"`
}

// Terminals. pty_open starts Argv (default the image's shell) on a new
// pseudo-terminal of Cols x Rows, and replies with its number. Its output
// comes as events of Stream StreamPTY, and once its shell has ended and
// the terminal is drained, one event of Stream StreamPTYExit with the
// shell's status. Output is flow-controlled end to end: the agent sends
// at most PTYWindow bytes past what the far end acknowledged (pty_input's
// Acked), and sends none before the first pty_input, so that whoever
// relays it can listen before the shell's first prompt.
const (
	OpPTYOpen   = "pty_open"   // Argv, Cwd, Env, Cols, Rows -> PTY
	OpPTYInput  = "pty_input"  // PTY: write Data (may be empty) and take Acked
	OpPTYResize = "pty_resize" // PTY, Cols, Rows
	OpPTYClose  = "pty_close"  // PTY: hang up and end its processes
)

// The Streams of a terminal's events.
const (
	StreamPTY     = "pty"
	StreamPTYExit = "pty_exit"
)

// PTYWindow is how far a terminal's output runs ahead of its
// acknowledgements; MaxPTYs is how many terminals a session has at once.
const (
	PTYWindow = 256 << 10
	MaxPTYs   = 4
)

// sessionDomain keeps a reply's or an event's MAC from passing for a
// trailer's, or for each other's.
const (
	replyDomain = Magic + " reply\n"
	eventDomain = Magic + " event\n"
)

func (s Seal) macOf(domain string, body []byte) []byte {
	key, _ := hex.DecodeString(s.Key)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(domain))
	m.Write(body)
	return hex.AppendEncode(nil, m.Sum(nil))
}

// SignReply encodes r with its MAC.
func (s Seal) SignReply(r *Reply) []byte {
	body, _ := json.Marshal(r)
	return append(append(body, ' '), s.macOf(replyDomain, body)...)
}

// OpenReply checks and decodes a reply's whole message.
func (s Seal) OpenReply(msg []byte) (*Reply, error) {
	body, err := s.open(replyDomain, msg)
	if err != nil {
		return nil, err
	}
	var r Reply
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, errorf("reply: %v", err)
	}
	return &r, nil
}

// SignEvent encodes e with its MAC.
func (s Seal) SignEvent(e *Event) []byte {
	body, _ := json.Marshal(e)
	return append(append(body, ' '), s.macOf(eventDomain, body)...)
}

// OpenEvent checks and decodes an event frame's payload.
func (s Seal) OpenEvent(payload []byte) (*Event, error) {
	body, err := s.open(eventDomain, payload)
	if err != nil {
		return nil, err
	}
	var e Event
	if err := json.Unmarshal(body, &e); err != nil {
		return nil, errorf("event: %v", err)
	}
	return &e, nil
}

// ErrBadMAC: a reply or event the agent holding the seal did not sign.
var ErrBadMAC = errors.New("envelope: message not signed by the session's agent")

func (s Seal) open(domain string, msg []byte) ([]byte, error) {
	if len(msg) < macLen+1 || msg[len(msg)-macLen-1] != ' ' {
		return nil, ErrBadMAC
	}
	body, sum := msg[:len(msg)-macLen-1], msg[len(msg)-macLen:]
	if !hmac.Equal(sum, s.macOf(domain, body)) {
		return nil, ErrBadMAC
	}
	return body, nil
}

// AppendMessage appends msg, the message of request or reply id, as
// frames: parts of kind part, the last of kind last.
func AppendMessage(dst []byte, part, last byte, id uint64, msg []byte) []byte {
	const room = MaxFramePayload - 8
	for {
		chunk := msg[:min(len(msg), room)]
		msg = msg[len(chunk):]
		kind := part
		if len(msg) == 0 {
			kind = last
		}
		dst = append(dst, kind)
		dst = binary.BigEndian.AppendUint32(dst, uint32(8+len(chunk)))
		dst = binary.BigEndian.AppendUint64(dst, id)
		dst = append(dst, chunk...)
		if kind == last {
			return dst
		}
	}
}

// Assembler puts messages cut into parts back together, at most
// MaxMessageBytes each and maxPending messages in progress at once.
type Assembler struct {
	parts      map[uint64][]byte
	maxPending int
}

// NewAssembler returns an assembler of at most maxPending messages at once.
func NewAssembler(maxPending int) *Assembler {
	return &Assembler{parts: map[uint64][]byte{}, maxPending: maxPending}
}

// Add takes the payload of one frame; last is whether it was the last
// part. It returns the message and its id once the last part came.
func (a *Assembler) Add(payload []byte, last bool) (id uint64, msg []byte, done bool, err error) {
	if len(payload) < 8 {
		return 0, nil, false, errorf("message part of %d bytes has no id", len(payload))
	}
	id = binary.BigEndian.Uint64(payload)
	prev, ok := a.parts[id]
	if !ok && !last && len(a.parts) >= a.maxPending {
		return id, nil, false, errorf("over %d messages in progress", a.maxPending)
	}
	if len(prev)+len(payload)-8 > MaxMessageBytes {
		delete(a.parts, id)
		return id, nil, false, fmt.Errorf("%w: message %d over %d bytes", ErrFormat, id, MaxMessageBytes)
	}
	msg = append(prev, payload[8:]...)
	if !last {
		a.parts[id] = msg
		return id, nil, false, nil
	}
	delete(a.parts, id)
	return id, msg, true, nil
}

// Drop forgets what came of message id so far.
func (a *Assembler) Drop(id uint64) { delete(a.parts, id) }
