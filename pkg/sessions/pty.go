package sessions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// A terminal of a session. sessionapi.OpPTY opens one: a shell on a pseudo-terminal
// in the sandbox. Its bytes then flow on two core NATS subjects of their
// own, PTYSubject(id, stream, "in") and (…, "out"), named by a stream
// the client picks at random: the client listens on "out" before it asks,
// so it misses nothing, and the name, 128 random bits, is what lets a
// message onto "in" once the owner's open was allowed.
//
// Each message's first byte says what it is:
//
//	in   'd' bytes        what is typed
//	in   'r' JSON         a resize: {"cols": N, "rows": N}
//	in   'a' decimal      output bytes taken so far, in all; also a keepalive
//	in   'c'              hang up
//	out  'd' bytes        the terminal's output
//	out  'x' JSON         its end (PTYExit), the last message
//
// Output is flow-controlled end to end: the sandbox sends at most
// PTYWindow bytes past the last 'a', so a reader that stops reading stops
// the shell (as a terminal does), never a buffer that grows. A terminal
// nothing is heard from for PTYIdle is hung up; clients send an 'a' every
// PTYKeepalive.

// The kinds of a terminal's messages (their first byte).
const (
	PTYData   byte = 'd'
	PTYResize byte = 'r'
	PTYAck    byte = 'a'
	PTYClose  byte = 'c'
	PTYExited byte = 'x'
)

// Bounds and timings of a terminal.
const (
	PTYWindow    = 256 << 10 // as the sandbox's agent keeps it (envelope.PTYWindow)
	MaxPTYInput  = 32 << 10  // bytes of one 'd' message in
	PTYKeepalive = 15 * time.Second
	PTYIdle      = 60 * time.Second
)

// PTYSubject is the subject of one direction ("in" or "out") of a
// terminal's stream.
func PTYSubject(id, stream, dir string) string {
	return subjectPrefix + id + ".pty." + stream + "." + dir
}

var streamRE = regexp.MustCompile(`^[A-Za-z0-9]{16,64}$`)

// ValidStream reports whether s can name a terminal's stream.
func ValidStream(s string) bool { return streamRE.MatchString(s) }

// PTYRequest opens a terminal: Cmd (default the image's shell) on a pty
// of Cols x Rows (default 80x24).
type PTYRequest struct {
	Stream string            `json:"stream"`
	Cols   int               `json:"cols,omitempty"`
	Rows   int               `json:"rows,omitempty"`
	Cmd    []string          `json:"cmd,omitempty"`
	Cwd    string            `json:"cwd,omitempty"`
	Env    map[string]string `json:"env,omitempty"`
}

// PTYInfo is an open terminal: its number in the session, its shell's
// process, and its subjects.
type PTYInfo struct {
	PTY int    `json:"pty"`
	PID int    `json:"pid"`
	In  string `json:"in"`
	Out string `json:"out"`
}

// PTYExit is how a terminal ended: its shell's status, or why it was cut
// (Reason: "idle", the session's end, "lost").
type PTYExit struct {
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   int    `json:"signal,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// PTYSize is a resize's body.
type PTYSize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// PTY is a client's open terminal. Read and Write may be called from two
// goroutines at once; Close from any.
type PTY struct {
	Info PTYInfo
	p    *pipe
}

// pipe is the client's end of a relayed stream, a terminal's or a
// connection's (conn.go): what comes on its "out" subject, acknowledged
// a quarter window at a time, and the keepalive that tells the session
// it is still read.
type pipe struct {
	nc  *nats.Conn
	sub *nats.Subscription
	in  string

	mu     sync.Mutex
	taken  int64 // output bytes read
	acked  int64 // of them, the last 'a' sent
	exit   *PTYExit
	stop   chan struct{}
	closed bool
}

// openPipe listens on stream's "out" subject (subject names them) and
// makes the call that opens it, whose answer out says its subjects.
func (c *Client) openPipe(ctx context.Context, id, op string, subject func(id, stream, dir string) string,
	stream string, req, out any, in func() string) (*pipe, error) {
	sub, err := c.nc.SubscribeSync(subject(id, stream, "out"))
	if err != nil {
		return nil, fmt.Errorf("sessions: listen to a %s: %w", op, err)
	}
	// The window bounds what is in flight; the limits only keep a client
	// that never reads from holding more.
	_ = sub.SetPendingLimits(-1, 4*PTYWindow)
	if err := c.nc.FlushTimeout(c.CallTimeout); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("sessions: listen to a %s: %w", op, err)
	}
	if err := c.Do(ctx, id, op, "", req, out, 0); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	p := &pipe{nc: c.nc, sub: sub, in: in(), stop: make(chan struct{})}
	go p.keepalive()
	return p, nil
}

func randomStream() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// OpenPTY opens a terminal in session id; req.Stream is picked when empty.
func (c *Client) OpenPTY(ctx context.Context, id string, req PTYRequest) (*PTY, error) {
	if !ValidID(id) {
		return nil, sessionapi.Errorf(sessionapi.ErrNotFound, "no session %q", id)
	}
	if req.Stream == "" {
		req.Stream = randomStream()
	}
	t := &PTY{}
	p, err := c.openPipe(ctx, id, sessionapi.OpPTY, PTYSubject, req.Stream, req, &t.Info, func() string { return t.Info.In })
	if err != nil {
		return nil, err
	}
	t.p = p
	return t, nil
}

// keepalive tells the session the stream is still read, and ends it as
// lost when nobody answers for the session any more.
func (p *pipe) keepalive() {
	t := time.NewTicker(PTYKeepalive)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		n := p.taken
		p.mu.Unlock()
		_, err := p.nc.Request(p.in, append([]byte{PTYAck}, strconv.FormatInt(n, 10)...), PTYKeepalive)
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) {
			p.end(&PTYExit{Reason: "lost: the session's worker does not answer"})
			return
		}
	}
}

func (p *pipe) end(e *PTYExit) {
	p.mu.Lock()
	if p.exit == nil {
		p.exit = e
	}
	p.mu.Unlock()
	_ = p.sub.Unsubscribe() // a Read waiting ends
}

// read returns the stream's next bytes; io.EOF once it has ended.
func (p *pipe) read(ctx context.Context) ([]byte, error) {
	for {
		msg, err := p.sub.NextMsgWithContext(ctx)
		if err != nil {
			p.mu.Lock()
			ended := p.exit != nil
			p.mu.Unlock()
			if ended || errors.Is(err, nats.ErrBadSubscription) || errors.Is(err, nats.ErrConnectionClosed) {
				p.end(&PTYExit{Reason: "closed"})
				return nil, io.EOF
			}
			return nil, err
		}
		if len(msg.Data) == 0 {
			continue
		}
		switch msg.Data[0] {
		case PTYData:
			data := msg.Data[1:]
			p.mu.Lock()
			p.taken += int64(len(data))
			ack := p.taken - p.acked
			if ack >= PTYWindow/4 {
				p.acked = p.taken
			}
			n := p.taken
			p.mu.Unlock()
			if ack >= PTYWindow/4 {
				_ = p.nc.Publish(p.in, append([]byte{PTYAck}, strconv.FormatInt(n, 10)...))
			}
			return data, nil
		case PTYExited:
			var e PTYExit
			if json.Unmarshal(msg.Data[1:], &e) != nil {
				e.Reason = "ended"
			}
			p.end(&e)
			return nil, io.EOF
		}
	}
}

func (p *pipe) exited() *PTYExit {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

// close hangs the stream up.
func (p *pipe) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.stop)
	p.mu.Unlock()
	_ = p.nc.Publish(p.in, []byte{PTYClose})
	p.end(&PTYExit{Reason: "closed"})
}

// Read returns the terminal's next output; io.EOF once it has ended (Exit
// says how).
func (t *PTY) Read(ctx context.Context) ([]byte, error) { return t.p.read(ctx) }

// Exit is how the terminal ended, nil while it runs.
func (t *PTY) Exit() *PTYExit { return t.p.exited() }

// Write sends what is typed.
func (t *PTY) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		chunk := b[:min(len(b), MaxPTYInput)]
		if err := t.p.nc.Publish(t.Info.In, append([]byte{PTYData}, chunk...)); err != nil {
			return n, err
		}
		n += len(chunk)
		b = b[len(chunk):]
	}
	return n, nil
}

// Resize sets the terminal's size.
func (t *PTY) Resize(cols, rows int) error {
	b, _ := json.Marshal(PTYSize{Cols: cols, Rows: rows})
	return t.p.nc.Publish(t.Info.In, append([]byte{PTYResize}, b...))
}

// Close hangs the terminal up.
func (t *PTY) Close() error {
	t.p.close()
	return nil
}
