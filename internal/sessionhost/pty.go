package sessionhost

import (
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// A session's terminals (pkg/sessions pty.go): the host relays each
// between its NATS subjects and the sandbox's agent. What is typed goes
// to the agent in order, one request at a time (a subscription's
// callbacks run one after another); output comes back as the agent's
// events and is published as it comes: the agent's window, refilled by
// the client's acknowledgements, bounds what is in flight, so nothing
// here buffers.

// relays are the terminals of one session, by their agent's number.
type relays struct {
	nc *nats.Conn

	mu     sync.Mutex
	byN    map[int]*relay
	ended  string // why the session ended; no more terminals then
	nstart int    // opens under way
}

func newRelays(nc *nats.Conn) *relays { return &relays{nc: nc, byN: map[int]*relay{}} }

// relay is one terminal.
type relay struct {
	n      int
	stream string
	out    string
	sub    *nats.Subscription
	heard  time.Time // the last message from the client, under relays.mu
	done   chan struct{}
	once   sync.Once
	nc     *nats.Conn
}

// event takes the agent's events of the session's terminals, from the
// sandbox's stream goroutine: a publish does not wait for a reader.
func (rs *relays) event(ev *envelope.Event) {
	if ev.Stream != envelope.StreamPTY && ev.Stream != envelope.StreamPTYExit {
		return
	}
	rs.mu.Lock()
	r := rs.byN[ev.PTY]
	if r != nil && ev.Stream == envelope.StreamPTYExit {
		delete(rs.byN, ev.PTY)
	}
	rs.mu.Unlock()
	if r == nil {
		return
	}
	if ev.Stream == envelope.StreamPTY {
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

// closeAll ends every terminal of a session that ended.
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
	if !sessions.ValidStream(req.Stream) {
		return nil, sessions.Errorf(sessions.ErrInvalid, "stream: 16 to 64 letters and digits, picked at random")
	}
	if req.Cols < 0 || req.Rows < 0 || req.Cols > 10000 || req.Rows > 10000 {
		return nil, sessions.Errorf(sessions.ErrInvalid, "cols, rows: 1 to 10000")
	}
	rs := l.ptys
	rs.mu.Lock()
	for _, r := range rs.byN {
		if r.stream == req.Stream {
			rs.mu.Unlock()
			return nil, sessions.Errorf(sessions.ErrExists, "stream %q is open already", req.Stream)
		}
	}
	if len(rs.byN)+rs.nstart >= envelope.MaxPTYs {
		rs.mu.Unlock()
		return nil, sessions.Errorf(sessions.ErrLimit, "a session has at most %d terminals at once", envelope.MaxPTYs)
	}
	rs.nstart++
	rs.mu.Unlock()
	defer func() {
		rs.mu.Lock()
		rs.nstart--
		rs.mu.Unlock()
	}()

	id := l.info.ID
	r := &relay{stream: req.Stream, out: sessions.PTYSubject(id, req.Stream, "out"), done: make(chan struct{}), nc: h.nc}
	in := sessions.PTYSubject(id, req.Stream, "in")
	sub, err := h.nc.Subscribe(in, func(msg *nats.Msg) { h.ptyInput(l, r, msg) })
	if err != nil {
		return nil, sessions.Errorf(sessions.ErrFailed, "listen to the terminal: %v", err)
	}
	// Input waits here while the agent takes the message before it: a
	// client typing faster than a sandbox reads has what is over dropped.
	_ = sub.SetPendingLimits(1024, 4<<20)
	r.sub = sub
	rep, err := h.do(l, &envelope.Request{Op: envelope.OpPTYOpen, Argv: req.Cmd, Cwd: req.Cwd, Env: req.Env, Cols: req.Cols, Rows: req.Rows}, 0)
	if err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	r.n = rep.PTY
	rs.mu.Lock()
	why := rs.ended
	if why == "" {
		r.heard = time.Now()
		rs.byN[r.n] = r
	}
	rs.mu.Unlock()
	if why != "" {
		_ = sub.Unsubscribe()
		return nil, sessions.Errorf(sessions.ErrGone, "session %s has ended", id)
	}
	// The agent sends no output before its first input: the relay is
	// ready for it now.
	if _, err := h.do(l, &envelope.Request{Op: envelope.OpPTYInput, PTY: r.n}, 0); err != nil {
		r.finish(&sessions.PTYExit{Reason: "failed"})
		return nil, err
	}
	h.wg.Go(func() { h.watchPTY(l, r) })
	h.log.Info("terminal opened", "session_id", id, "pty", r.n)
	return &sessions.PTYInfo{PTY: r.n, PID: rep.PID, In: in, Out: r.out}, nil
}

// watchPTY hangs up a terminal nothing was heard from for PTYIdle: a
// client that went away without closing it.
func (h *Host) watchPTY(l *live, r *relay) {
	t := time.NewTicker(sessions.PTYIdle / 12)
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return
		case now := <-t.C:
			l.ptys.mu.Lock()
			idle := now.Sub(r.heard) > sessions.PTYIdle
			l.ptys.mu.Unlock()
			if idle {
				_, _ = h.do(l, &envelope.Request{Op: envelope.OpPTYClose, PTY: r.n}, 0)
				select {
				case <-r.done:
				case <-time.After(5 * time.Second):
					l.ptys.mu.Lock()
					delete(l.ptys.byN, r.n)
					l.ptys.mu.Unlock()
					r.finish(&sessions.PTYExit{Reason: "idle"})
				}
				return
			}
		}
	}
}

// ptyInput serves one message of a terminal's input subject.
func (h *Host) ptyInput(l *live, r *relay, msg *nats.Msg) {
	if len(msg.Data) == 0 {
		return
	}
	now := time.Now()
	l.ptys.mu.Lock()
	r.heard = now
	l.ptys.mu.Unlock()
	l.mu.Lock()
	l.active = now.UTC() // an attached terminal keeps its session from idling
	l.mu.Unlock()
	req := &envelope.Request{PTY: r.n}
	switch msg.Data[0] {
	case sessions.PTYData:
		if len(msg.Data)-1 > sessions.MaxPTYInput {
			return
		}
		req.Op, req.Data = envelope.OpPTYInput, msg.Data[1:]
	case sessions.PTYAck:
		n, err := strconv.ParseInt(string(msg.Data[1:]), 10, 64)
		if err != nil {
			return
		}
		req.Op, req.Acked = envelope.OpPTYInput, n
	case sessions.PTYResize:
		var sz sessions.PTYSize
		if json.Unmarshal(msg.Data[1:], &sz) != nil {
			return
		}
		req.Op, req.Cols, req.Rows = envelope.OpPTYResize, sz.Cols, sz.Rows
	case sessions.PTYClose:
		req.Op = envelope.OpPTYClose
	default:
		return
	}
	_, err := h.do(l, req, 0)
	if msg.Reply != "" {
		_ = msg.Respond(nil)
	}
	if errors.Is(err, sessions.ErrNotFound) {
		// The agent has no such terminal any more: its end was missed.
		l.ptys.mu.Lock()
		delete(l.ptys.byN, r.n)
		l.ptys.mu.Unlock()
		r.finish(&sessions.PTYExit{Reason: "ended"})
	}
}
