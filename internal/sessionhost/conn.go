package sessionhost

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// A session's exposed ports and the connections to them (pkg/sessions
// conn.go). A port is exposed by its owner and recorded in the
// session's record; a connection is opened only to a port exposed, and
// relayed as a terminal is (pty.go), by the agent, which dials the
// sandbox's loopback: the sandbox's network stays as it was.

var connKind = &relayKind{what: "connection", open: envelope.OpConnOpen, input: envelope.OpConnInput, close: envelope.OpConnClose,
	data: envelope.StreamConn, end: envelope.StreamConnEnd, max: envelope.MaxConns,
	number:   func(ev *envelope.Event) int { return ev.Conn },
	request:  func(n int) *envelope.Request { return &envelope.Request{Conn: n} },
	maxInput: sessions.MaxConnInput}

func (h *Host) openConn(l *live, body json.RawMessage) (any, error) {
	var req sessions.ConnRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if !exposedAs(l, req) {
		return nil, sessionapi.Errorf(sessionapi.ErrNotFound, "port %d of session %s is not exposed", req.Port, l.info.ID)
	}
	r, _, err := h.openRelay(l, l.conns, req.Stream, sessions.ConnSubject, &envelope.Request{Op: envelope.OpConnOpen, Port: req.Port})
	if err != nil {
		return nil, err
	}
	if !exposedAs(l, req) { // unexposed while it opened: closePort may have missed it
		h.closePort(l, req.Port)
		return nil, sessionapi.Errorf(sessionapi.ErrNotFound, "port %d of session %s is not exposed", req.Port, l.info.ID)
	}
	return &sessions.ConnInfo{Conn: r.n, In: r.sub.Subject, Out: r.out}, nil
}

// exposedAs says whether req's port is exposed, in the exposure req
// names if it names one.
func exposedAs(l *live, req sessions.ConnRequest) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.info.Ports, req.Port) && (req.Exposure == 0 || l.info.PortExposure[req.Port] == req.Exposure)
}

// ports serves expose, unexpose and ports: each answers the ports
// exposed after it.
func (h *Host) ports(l *live, op string, body json.RawMessage) (any, error) {
	if op != sessionapi.OpPorts {
		var req sessions.PortRequest
		if err := decode(body, &req); err != nil {
			return nil, err
		}
		if err := sessions.ValidPort(req.Port); err != nil {
			return nil, err
		}
		l.mu.Lock()
		has := slices.Contains(l.info.Ports, req.Port)
		switch {
		case op == sessionapi.OpExpose && !has && len(l.info.Ports) >= sessions.MaxPorts:
			l.mu.Unlock()
			return nil, sessionapi.Errorf(sessionapi.ErrLimit, "a session exposes at most %d ports", sessions.MaxPorts)
		case op == sessionapi.OpExpose && !has:
			l.info.Ports = append(slices.Clone(l.info.Ports), req.Port)
			slices.Sort(l.info.Ports)
			l.info.Exposures++
			l.info.PortExposure = maps.Clone(l.info.PortExposure)
			if l.info.PortExposure == nil {
				l.info.PortExposure = map[int]int{}
			}
			l.info.PortExposure[req.Port] = l.info.Exposures
		case op == sessionapi.OpUnexpose && !has:
			l.mu.Unlock()
			return nil, sessionapi.Errorf(sessionapi.ErrNotFound, "port %d of session %s is not exposed", req.Port, l.info.ID)
		case op == sessionapi.OpUnexpose:
			l.info.Ports = slices.DeleteFunc(slices.Clone(l.info.Ports), func(p int) bool { return p == req.Port })
			l.info.PortExposure = maps.Clone(l.info.PortExposure)
			delete(l.info.PortExposure, req.Port)
		}
		l.mu.Unlock()
		if op == sessionapi.OpUnexpose {
			h.closePort(l, req.Port)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.record(ctx, l); err != nil {
			h.log.Warn("recording the session's ports failed", "session_id", l.info.ID, "error", err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.info.Ports), nil
}

// closePort ends the session's connections to port, which is no longer
// exposed: a connection a gateway keeps alive between requests, or a
// WebSocket, opened while it was, reaches its server no more.
func (h *Host) closePort(l *live, port int) {
	rs := l.conns
	var open []*relay
	rs.mu.Lock()
	for n, r := range rs.byN {
		if r.port == port {
			open = append(open, r)
			delete(rs.byN, n)
		}
	}
	rs.mu.Unlock()
	for _, r := range open {
		req := rs.kind.request(r.n)
		req.Op = rs.kind.close
		if _, err := h.do(l, req, 0); err != nil {
			h.log.Warn("closing a connection to an unexposed port failed", "session_id", l.info.ID, "connection", r.n, "error", err)
		}
		r.finish(&sessions.PTYExit{Reason: "the port is no longer exposed"})
	}
}
