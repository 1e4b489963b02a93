package main

import (
	"errors"
	"net"

	"strconv"
	"sync"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// A session's connections (envelope.OpConnOpen): a TCP connection to a
// server the session runs on the sandbox's loopback, relayed as a
// terminal is (pty.go): its bytes go out as signed events, a window at a
// time, and what comes in is written by requests. The sandbox's network
// is not touched: the agent dials 127.0.0.1, nothing else.

type tcpConn struct {
	n int
	c *net.TCPConn

	mu      sync.Mutex
	cond    *sync.Cond
	sent    int64 // bytes sent as events
	acked   int64 // of them, what the far end took
	started bool  // the first conn_input came: bytes may flow
	closed  bool
}

// conns are the agent's open connections; one agent runs in a process.
var conns = struct {
	sync.Mutex
	m    map[int]*tcpConn
	next int
}{m: map[int]*tcpConn{}}

// connWriteTimeout bounds one write to a server that does not read: the
// connection then fails, as a peer's would.
const connWriteTimeout = 30 * time.Second

func (a *agent) conn(req *envelope.Request) *envelope.Reply {
	if req.Op == envelope.OpConnOpen {
		return a.connOpen(req)
	}
	conns.Lock()
	t := conns.m[req.Conn]
	conns.Unlock()
	if t == nil {
		return fail(req.ID, sessionapi.ErrNotFound, "no connection %d", req.Conn)
	}
	switch req.Op {
	case envelope.OpConnInput:
		t.mu.Lock()
		t.started = true
		if req.Acked > t.acked && req.Acked <= t.sent {
			t.acked = req.Acked
		}
		t.cond.Broadcast()
		t.mu.Unlock()
		if len(req.Data) > 0 {
			_ = t.c.SetWriteDeadline(time.Now().Add(connWriteTimeout))
			if _, err := t.c.Write(req.Data); err != nil {
				t.close()
				return fail(req.ID, sessionapi.ErrFailed, "write to connection %d: %v", t.n, err)
			}
		}
		if req.EOF {
			_ = t.c.CloseWrite()
		}
	case envelope.OpConnClose:
		t.close()
	}
	return &envelope.Reply{ID: req.ID, Conn: t.n}
}

func (a *agent) connOpen(req *envelope.Request) *envelope.Reply {
	if req.Port < 1 || req.Port > 65535 {
		return fail(req.ID, sessionapi.ErrInvalid, "port %d: 1 to 65535", req.Port)
	}
	conns.Lock()
	if len(conns.m) >= envelope.MaxConns {
		conns.Unlock()
		return fail(req.ID, sessionapi.ErrLimit, "a session has at most %d connections at once", envelope.MaxConns)
	}
	conns.next++
	n := conns.next
	conns.m[n] = nil // held while it connects
	conns.Unlock()
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(req.Port)), 5*time.Second)
	conns.Lock()
	if err != nil {
		delete(conns.m, n)
		conns.Unlock()
		return fail(req.ID, sessionapi.ErrFailed, "nothing answers on port %d in the sandbox: %v", req.Port, errors.Unwrap(err))
	}
	t := &tcpConn{n: n, c: c.(*net.TCPConn)}
	t.cond = sync.NewCond(&t.mu)
	conns.m[n] = t
	conns.Unlock()
	go a.pumpConn(req.ID, t)
	return &envelope.Reply{ID: req.ID, Conn: n}
}

// close ends the connection: its pump sends what ends it.
func (t *tcpConn) close() {
	t.mu.Lock()
	t.closed = true
	t.cond.Broadcast()
	t.mu.Unlock()
	_ = t.c.SetReadDeadline(time.Now())
}

// pumpConn sends what the server sends as events of request id, at most
// ConnWindow bytes ahead of what was acknowledged, until the server
// closes its side, the connection fails, or it is closed; then its end.
func (a *agent) pumpConn(id uint64, t *tcpConn) {
	buf := make([]byte, 32<<10)
	for {
		t.mu.Lock()
		for !t.closed && (!t.started || t.sent-t.acked >= envelope.ConnWindow) {
			t.cond.Wait()
		}
		room := min(int64(len(buf)), envelope.ConnWindow-(t.sent-t.acked))
		closed := t.closed
		t.mu.Unlock()
		if closed {
			break
		}
		n, err := t.c.Read(buf[:room])
		if n > 0 {
			t.mu.Lock()
			t.sent += int64(n)
			t.mu.Unlock()
			_ = a.fr.frame(envelope.FrameEvent, a.seal.SignEvent(&envelope.Event{ID: id, Stream: envelope.StreamConn, Conn: t.n, Data: buf[:n]}))
		}
		if err != nil {
			break // the server's EOF, a reset, or close's deadline
		}
	}
	_ = t.c.Close()
	conns.Lock()
	delete(conns.m, t.n)
	conns.Unlock()
	_ = a.fr.frame(envelope.FrameEvent, a.seal.SignEvent(&envelope.Event{ID: id, Stream: envelope.StreamConnEnd, Conn: t.n}))
}
