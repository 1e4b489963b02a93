package sessionhost

import (
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// A session's terminals (pkg/sessions pty.go): the host relays each
// between its NATS subjects and the sandbox's agent. What is typed goes
// to the agent in order, one request at a time (a subscription's
// callbacks run one after another); output comes back as the agent's
// events and is published as it comes: the agent's window, refilled by
// the client's acknowledgements, bounds what is in flight, so nothing
// here buffers.

// relays are the terminals of one session, or its connections
// (conn.go), by their agent's number.
type relays struct {
	nc   *nats.Conn
	kind *relayKind

	mu     sync.Mutex
	byN    map[int]*relay
	ended  string // why the session ended; no more terminals then
	nstart int    // opens under way
}

func newRelays(nc *nats.Conn, kind *relayKind) *relays {
	return &relays{nc: nc, kind: kind, byN: map[int]*relay{}}
}

// relayKind is what tells a terminal's relay from a connection's: the
// agent's ops and event streams, and how a request names one.
type relayKind struct {
	what         string // "terminal", "connection"
	open         string
	input, close string
	resize       string // "" for none
	data, end    string
	max          int
	number       func(ev *envelope.Event) int
	request      func(n int) *envelope.Request
	maxInput     int
}

var ptyKind = &relayKind{what: "terminal", open: envelope.OpPTYOpen, input: envelope.OpPTYInput, close: envelope.OpPTYClose,
	resize: envelope.OpPTYResize, data: envelope.StreamPTY, end: envelope.StreamPTYExit, max: envelope.MaxPTYs,
	number:   func(ev *envelope.Event) int { return ev.PTY },
	request:  func(n int) *envelope.Request { return &envelope.Request{PTY: n} },
	maxInput: sessions.MaxPTYInput}

// relay is one terminal or connection.
type relay struct {
	n      int
	stream string
	out    string
	sub    *nats.Subscription
	port   int       // a connection's: the port it goes to
	heard  time.Time // the last message from the client, under relays.mu
	done   chan struct{}
	once   sync.Once
	nc     *nats.Conn
}

// event takes the agent's events of the session's terminals, from the
// sandbox's stream goroutine: a publish does not wait for a reader.
func (rs *relays) event(ev *envelope.Event) {
	k := rs.kind
	if ev.Stream != k.data && ev.Stream != k.end {
		return
	}
	n := k.number(ev)
	rs.mu.Lock()
	r := rs.byN[n]
	if r != nil && ev.Stream == k.end {
		delete(rs.byN, n)
	}
	rs.mu.Unlock()
	if r == nil {
		return
	}
	if ev.Stream == k.data {
		_ = rs.nc.Publish(r.out, append([]byte{sessions.PTYData}, ev.Data...))
		return
	}
	r.finish(&sessions.PTYExit{ExitCode: ev.Exit, Signal: ev.Signal})
}

// finish sends the terminal's end and stops relaying it.
func (r *relay) finish(e *sessions.PTYExit) {
	r.once.Do(func() {
		_ = r.sub.Unsubscribe()
		b, _ := json.Marshal(e)
		_ = r.nc.Publish(r.out, append([]byte{sessions.PTYExited}, b...))
		close(r.done)
	})
}

// closeAll ends every terminal (or connection) of a session that ended.
func (rs *relays) closeAll(why string) {
	rs.mu.Lock()
	rs.ended = why
	all := rs.byN
	rs.byN = map[int]*relay{}
	rs.mu.Unlock()
	for _, r := range all {
		r.finish(&sessions.PTYExit{Reason: "the session ended: " + why})
	}
}

func (h *Host) openPTY(l *live, body json.RawMessage) (any, error) {
	var req sessions.PTYRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if req.Cols < 0 || req.Rows < 0 || req.Cols > 10000 || req.Rows > 10000 {
		return nil, sessionapi.Errorf(sessionapi.ErrInvalid, "cols, rows: 1 to 10000")
	}
	open := &envelope.Request{Op: envelope.OpPTYOpen, Argv: req.Cmd, Cwd: req.Cwd, Env: req.Env, Cols: req.Cols, Rows: req.Rows}
	r, rep, err := h.openRelay(l, l.ptys, req.Stream, sessions.PTYSubject, open)
	if err != nil {
		return nil, err
	}
	return &sessions.PTYInfo{PTY: r.n, PID: rep.PID, In: r.sub.Subject, Out: r.out}, nil
}

// openRelay asks the agent to open a terminal or connection (open) and
// relays it between the agent and the NATS subjects of stream.
func (h *Host) openRelay(l *live, rs *relays, stream string, subject func(id, stream, dir string) string,
	open *envelope.Request) (*relay, *envelope.Reply, error) {
	k := rs.kind
	if !sessions.ValidStream(stream) {
		return nil, nil, sessionapi.Errorf(sessionapi.ErrInvalid, "stream: 16 to 64 letters and digits, picked at random")
	}
	rs.mu.Lock()
	for _, r := range rs.byN {
		if r.stream == stream {
			rs.mu.Unlock()
			return nil, nil, sessionapi.Errorf(sessionapi.ErrExists, "stream %q is open already", stream)
		}
	}
	if len(rs.byN)+rs.nstart >= k.max {
		rs.mu.Unlock()
		return nil, nil, sessionapi.Errorf(sessionapi.ErrLimit, "a session has at most %d %ss at once", k.max, k.what)
	}
	rs.nstart++
	rs.mu.Unlock()
	defer func() {
		rs.mu.Lock()
		rs.nstart--
		rs.mu.Unlock()
	}()

	id := l.info.ID
	r := &relay{stream: stream, port: open.Port, out: subject(id, stream, "out"), done: make(chan struct{}), nc: h.nc}
	sub, err := h.nc.Subscribe(subject(id, stream, "in"), func(msg *nats.Msg) { h.relayInput(l, rs, r, msg) })
	if err != nil {
		return nil, nil, sessionapi.Errorf(sessionapi.ErrFailed, "listen to the %s: %v", k.what, err)
	}
	// Input waits here while the agent takes the message before it: a
	// client typing faster than a sandbox reads has what is over dropped
	// (a connection's client waits for each write's answer instead).
	_ = sub.SetPendingLimits(1024, 4<<20)
	r.sub = sub
	rep, err := h.do(l, open, 0)
	if err != nil {
		_ = sub.Unsubscribe()
		return nil, nil, err
	}
	r.n = k.number(&envelope.Event{PTY: rep.PTY, Conn: rep.Conn})
	rs.mu.Lock()
	why := rs.ended
	if why == "" {
		r.heard = time.Now()
		rs.byN[r.n] = r
	}
	rs.mu.Unlock()
	if why != "" {
		_ = sub.Unsubscribe()
		return nil, nil, sessionapi.Errorf(sessionapi.ErrGone, "session %s has ended", id)
	}
	// The agent sends no output before its first input: the relay is
	// ready for it now.
	first := k.request(r.n)
	first.Op = k.input
	if _, err := h.do(l, first, 0); err != nil {
		r.finish(&sessions.PTYExit{Reason: "failed"})
		return nil, nil, err
	}
	h.wg.Go(func() { h.watchRelay(l, rs, r) })
	h.log.Info(k.what+" opened", "session_id", id, k.what, r.n)
	return r, rep, nil
}

// watchRelay hangs up a terminal (or connection) nothing was heard from
// for PTYIdle: a client that went away without closing it.
func (h *Host) watchRelay(l *live, rs *relays, r *relay) {
	t := time.NewTicker(sessions.PTYIdle / 12)
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return
		case now := <-t.C:
			rs.mu.Lock()
			idle := now.Sub(r.heard) > sessions.PTYIdle
			rs.mu.Unlock()
			if idle {
				req := rs.kind.request(r.n)
				req.Op = rs.kind.close
				_, _ = h.do(l, req, 0)
				select {
				case <-r.done:
				case <-time.After(5 * time.Second):
					rs.mu.Lock()
					delete(rs.byN, r.n)
					rs.mu.Unlock()
					r.finish(&sessions.PTYExit{Reason: "idle"})
				}
				return
			}
		}
	}
}

// relayInput serves one message of a terminal's (or connection's) input
// subject. A message that asks for an answer gets one once the agent has
// taken it: empty, or what failed.
func (h *Host) relayInput(l *live, rs *relays, r *relay, msg *nats.Msg) {
	if len(msg.Data) == 0 {
		return
	}
	now := time.Now()
	rs.mu.Lock()
	r.heard = now
	rs.mu.Unlock()
	l.mu.Lock()
	l.active = now.UTC() // an attached terminal keeps its session from idling
	l.mu.Unlock()
	k := rs.kind
	req := k.request(r.n)
	switch msg.Data[0] {
	case sessions.PTYData:
		if len(msg.Data)-1 > k.maxInput {
			return
		}
		req.Op, req.Data = k.input, msg.Data[1:]
	case sessions.PTYAck:
		n, err := strconv.ParseInt(string(msg.Data[1:]), 10, 64)
		if err != nil {
			return
		}
		req.Op, req.Acked = k.input, n
	case sessions.PTYResize:
		var sz sessions.PTYSize
		if k.resize == "" || json.Unmarshal(msg.Data[1:], &sz) != nil {
			return
		}
		req.Op, req.Cols, req.Rows = k.resize, sz.Cols, sz.Rows
	case sessions.ConnEOF:
		if k != connKind {
			return
		}
		req.Op, req.EOF = k.input, true
	case sessions.PTYClose:
		req.Op = k.close
	default:
		return
	}
	_, err := h.do(l, req, 0)
	if msg.Reply != "" {
		var answer []byte
		if err != nil {
			answer = []byte(err.Error())
		}
		_ = msg.Respond(answer)
	}
	if errors.Is(err, sessionapi.ErrNotFound) {
		// The agent has no such terminal any more: its end was missed.
		rs.mu.Lock()
		delete(rs.byN, r.n)
		rs.mu.Unlock()
		r.finish(&sessions.PTYExit{Reason: "ended"})
	}
}
