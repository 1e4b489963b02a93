package sessionhost

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/sessionwire"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// onCall serves one call on a session, in a goroutine of its own so that
// a long command does not hold up the session's other calls; at most
// Config.MaxCalls at once.
func (h *Host) onCall(l *live, msg *nats.Msg) {
	op := msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:]
	var call sessionwire.Call
	if err := json.Unmarshal(msg.Data, &call); err != nil {
		answer(msg, nil, sessionapi.Errorf(sessionapi.ErrInvalid, "not a call: %v", err))
		return
	}
	if call.Owner != l.info.Owner {
		// Another owner's: as for a session that does not exist.
		answer(msg, nil, sessionapi.Errorf(sessionapi.ErrNotFound, "no session %q", l.info.ID))
		return
	}
	if op == sessionapi.OpCells {
		h.serveCells(msg, l.cells, call.Body)
		return
	}
	select {
	case l.calls <- struct{}{}:
	default:
		answer(msg, nil, sessionapi.Errorf(sessionapi.ErrLimit, "session %s serves at most %d calls at once", l.info.ID, h.cfg.MaxCalls))
		return
	}
	h.wg.Go(func() {
		defer func() { <-l.calls }()
		var claim *cachedAnswer
		if call.Key != "" {
			// A retry that comes while the first call still runs waits
			// for its answer: a client retries when its request timed
			// out, which a long command's does.
			c, first := l.answers.claim(op + " " + call.Key)
			if !first {
				<-c.done
				if c.data != nil {
					_ = msg.Respond(c.data)
					return
				}
				// Too large to keep (a big read): it runs again.
			} else {
				claim = c
			}
		}
		l.mu.Lock()
		l.active = time.Now().UTC()
		l.mu.Unlock()
		l.callStarted(op)
		result, err := h.serve(l, op, call.Body)
		l.callEnded()
		if errors.Is(err, errEnded) || errors.Is(err, context.Canceled) {
			err = sessionapi.Errorf(sessionapi.ErrGone, "session %s has ended", l.info.ID)
		}
		var a sessionwire.Answer
		if err != nil {
			e := sessionapi.AsError(err)
			if e == nil {
				e = sessionapi.Errorf(sessionapi.ErrFailed, "%v", err)
			}
			a.Error = e
		} else if result != nil {
			a.Result, _ = json.Marshal(result)
		}
		data, _ := json.Marshal(a)
		if max := h.nc.MaxPayload(); max > 0 && int64(len(data)) > max-answerRoom {
			// NATS would refuse it, and the caller wait out its timeout
			// for nothing (a listing of long names, many processes' argv).
			data, _ = json.Marshal(sessionwire.Answer{Error: sessionapi.Errorf(sessionapi.ErrLimit,
				"the answer is %d bytes, over the %d a message of this fleet may carry", len(data), max-answerRoom)})
		}
		if claim != nil {
			l.answers.finish(op+" "+call.Key, claim, data)
		}
		_ = msg.Respond(data)
	})
}

// answerRoom is what a reply's subject and headers may take of a NATS
// message's payload bound.
const answerRoom = 4 << 10

func decode(body json.RawMessage, v any) error {
	if len(body) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return sessionapi.Errorf(sessionapi.ErrInvalid, "%v", err)
	}
	return nil
}

// do sends one request to the session's agent. An error of its reply is
// the caller's as the agent gave it: the agent answers with the session's
// own codes (sessionapi).
func (h *Host) do(l *live, req *envelope.Request, wait time.Duration) (*envelope.Reply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait+30*time.Second)
	defer cancel()
	r, err := l.sb.Do(ctx, req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, sessionapi.Errorf(sessionapi.ErrFailed, "the sandbox did not answer within %s", wait+30*time.Second)
		}
		return nil, errEnded
	}
	if r.Error != nil {
		return nil, r.Error
	}
	return r, nil
}

func (h *Host) serve(l *live, op string, body json.RawMessage) (any, error) {
	switch op {
	case sessionapi.OpInfo, sessionapi.OpKeepalive:
		info := l.snapshot()
		if nw, ok := l.sb.(Networked); ok {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			info.Egress, _ = nw.Egress(ctx) // the accounting is a courtesy: the session answers without it
			cancel()
		}
		return &info, nil
	case sessionapi.OpNetwork:
		return h.setNetwork(l, body)
	case sessionapi.OpDelete:
		h.end(l, sessions.EndDeleted)
		info := l.snapshot()
		return &info, nil
	case sessionapi.OpPause:
		return h.pause(l)
	case sessionapi.OpCheckpoint:
		return h.checkpointNow(l)
	case sessionapi.OpExec:
		return h.exec(l, body)
	case sessionapi.OpCode:
		return h.code(l, body)
	case sessionapi.OpReset:
		return pass[sessionapi.CodeRequest](h, l, op, body)
	case sessionapi.OpContexts, sessionapi.OpContext, sessionapi.OpEndContext:
		return pass[sessionapi.ContextRequest](h, l, op, body)
	case sessionapi.OpProcesses:
		return pass[struct{}](h, l, op, body)
	case sessionapi.OpProcess:
		return h.process(l, body)
	case sessionapi.OpSignal:
		return pass[sessionapi.SignalRequest](h, l, op, body)
	case sessionapi.OpStdin:
		return pass[sessionapi.StdinRequest](h, l, op, body)
	case sessionapi.OpRead, sessionapi.OpWrite, sessionapi.OpList, sessionapi.OpStat, sessionapi.OpRemove, sessionapi.OpMkdir, sessionapi.OpRename:
		return h.file(l, op, body)
	case sessionapi.OpPTY:
		return h.openPTY(l, body)
	case sessionapi.OpConn:
		return h.openConn(l, body)
	case sessionapi.OpExpose, sessionapi.OpUnexpose, sessionapi.OpPorts:
		return h.ports(l, op, body)
	}
	return nil, sessionapi.Errorf(sessionapi.ErrInvalid, "unknown operation %q", op)
}

// timeout is a call's own timeout, the session's limit by default and
// at most.
func (l *live) timeout(asked time.Duration) time.Duration {
	if asked <= 0 || asked > l.lim.Timeout.D() {
		return l.lim.Timeout.D()
	}
	return asked
}

// forward asks the session's agent op with req, the session's request as
// the host checked it, and returns the agent's result as it came: the
// agent answers with the session's own result types (sessionapi).
func (h *Host) forward(l *live, op string, req any, wait time.Duration) (json.RawMessage, error) {
	r, err := envelope.NewRequest(op, req)
	if err != nil {
		return nil, sessionapi.Errorf(sessionapi.ErrInvalid, "%v", err)
	}
	rep, err := h.do(l, r, wait)
	if err != nil {
		return nil, err
	}
	return rep.Result, nil
}

// pass decodes body as a T, which drops nothing the agent would read
// (an unknown field is invalid), and forwards it.
func pass[T any](h *Host, l *live, op string, body json.RawMessage) (any, error) {
	var req T
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return h.forward(l, op, &req, 0)
}

func (h *Host) exec(l *live, body json.RawMessage) (any, error) {
	var req sessionapi.ExecRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	t := l.timeout(req.Timeout.D())
	if req.Background {
		t = 0
	}
	req.Timeout = limits.Duration(t)
	return h.forward(l, sessionapi.OpExec, &req, t)
}

func (h *Host) code(l *live, body json.RawMessage) (any, error) {
	var req sessionapi.CodeRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	t := l.timeout(req.Timeout.D())
	req.Timeout = limits.Duration(t)
	at := time.Now().UTC()
	r, err := h.forward(l, sessionapi.OpCode, &req, t)
	if err != nil {
		return nil, err
	}
	var res sessionapi.CodeResult
	if err := json.Unmarshal(r, &res); err != nil {
		return nil, sessionapi.Errorf(sessionapi.ErrFailed, "the sandbox's answer: %v", err)
	}
	checkDisplays(&res)
	l.cells.add(newCell(req, &res, at))
	return &res, nil
}

// checkDisplays keeps a cell's display outputs only when they are what
// their type says (envelope.CheckDisplay), and states an image's size
// from its own header: the bytes are the cell's.
func checkDisplays(res *sessionapi.CodeResult) {
	kept := res.Display[:0]
	for _, d := range res.Display {
		data, err := base64.StdEncoding.DecodeString(d.Data)
		w, h, ok := envelope.CheckDisplay(d.MIME, data)
		if err != nil || !ok {
			res.DisplayDropped++
			continue
		}
		d.Width, d.Height = w, h
		kept = append(kept, d)
	}
	res.Display = kept
}

// process reads a background process's output, waiting for its end
// within the session's timeout.
func (h *Host) process(l *live, body json.RawMessage) (any, error) {
	var req sessionapi.ProcessRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	var wait time.Duration
	if req.Wait > 0 {
		wait = l.timeout(req.Wait.D())
	}
	req.Wait = limits.Duration(wait)
	return h.forward(l, sessionapi.OpProcess, &req, wait)
}

func (h *Host) file(l *live, op string, body json.RawMessage) (any, error) {
	var req sessionapi.FileRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if len(req.Data) > sessionapi.MaxFileChunk {
		return nil, sessionapi.Errorf(sessionapi.ErrLimit, "data: %d bytes, over %d a call", len(req.Data), sessionapi.MaxFileChunk)
	}
	if req.Length <= 0 || req.Length > sessionapi.MaxFileChunk {
		req.Length = sessionapi.MaxFileChunk
	}
	return h.forward(l, op, &req, 0)
}

// answerCache keeps the last answers by idempotency key, so that a
// retried call gets its first answer and runs nothing again; a key is
// claimed when its first call starts, so that a retry that comes before
// the answer waits for it.
type answerCache struct {
	mu    sync.Mutex
	max   int
	order []string
	m     map[string]*cachedAnswer
	bytes int // of the answers kept
}

// cachedAnswer is a key's answer: data once done is closed, nil when it
// was too large to keep.
type cachedAnswer struct {
	done chan struct{}
	data []byte
}

func newAnswerCache(max int) *answerCache {
	return &answerCache{max: max, m: map[string]*cachedAnswer{}}
}

// maxCachedAnswer bounds an answer kept for a retry: a larger one (a big
// read) is not kept, and a retry of it runs again, which a read may.
const maxCachedAnswer = 1 << 20

// maxCachedBytes bounds the answers a session keeps in all: 64 answers
// of near maxCachedAnswer each (a read's, an exec's output) would hold
// 64 MiB a session on the worker, which an owner's keys choose. Past
// it the oldest are forgotten first: a retry comes soon after its call.
const maxCachedBytes = 8 << 20

// claim returns key's answer, and whether this call is its first, which
// must then finish it.
func (c *answerCache) claim(key string) (a *cachedAnswer, first bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a, ok := c.m[key]; ok {
		return a, false
	}
	if len(c.order) >= c.max {
		c.evictLocked()
	}
	a = &cachedAnswer{done: make(chan struct{})}
	c.order = append(c.order, key)
	c.m[key] = a
	return a, true
}

// finish records the answer of a claimed key and wakes its retries.
func (c *answerCache) finish(key string, a *cachedAnswer, data []byte) {
	c.mu.Lock()
	if len(data) <= maxCachedAnswer {
		a.data = data // for the retries waiting on it, kept or not
		if c.m[key] == a {
			c.bytes += len(data)
			for c.bytes > maxCachedBytes && len(c.order) > 1 {
				c.evictLocked()
			}
		}
	} else if c.m[key] == a {
		delete(c.m, key) // the next retry runs again
		c.order = slices.DeleteFunc(c.order, func(k string) bool { return k == key })
	}
	c.mu.Unlock()
	close(a.done)
}

// evictLocked forgets the oldest key. A call still running keeps its
// claim (its answer then is not kept): its retries wait on the claim
// they hold already.
func (c *answerCache) evictLocked() {
	k := c.order[0]
	c.order = c.order[1:]
	if a := c.m[k]; a != nil {
		c.bytes -= len(a.data)
	}
	delete(c.m, k)
}

// Networked is a session's sandbox whose egress policy can change while
// it runs (internal/executor's Session).
type Networked interface {
	SetNetwork(ctx context.Context, n *limits.Network) (limits.Limits, error)
	Egress(ctx context.Context) ([]limits.NetworkUse, error)
}

// setNetwork replaces the session's policy: body is a limits.network
// value (a policy object, "none" or false, true).
func (h *Host) setNetwork(l *live, body json.RawMessage) (*sessions.Info, error) {
	nw, ok := l.sb.(Networked)
	if !ok {
		return nil, sessionapi.Errorf(sessionapi.ErrInvalid, "this worker's sessions cannot change their network")
	}
	var n limits.Network
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, sessionapi.Errorf(sessionapi.ErrInvalid, "the body is the new limits.network: a policy object, \"none\" or false")
	}
	if err := json.Unmarshal(body, &n); err != nil {
		return nil, sessionapi.Errorf(sessionapi.ErrInvalid, "limits.network: %v", err)
	}
	// Checked as a create's limits are: beyond the worker's caps is
	// invalid, named.
	l.mu.Lock()
	want, tenant, image := l.lim, l.info.Tenant, l.info.Image
	l.mu.Unlock()
	want.Network = &n
	if _, err := h.cfg.Limits(tenant, image, want); err != nil {
		return nil, sessionapi.Errorf(sessionapi.ErrInvalid, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lim, err := nw.SetNetwork(ctx, &n)
	if err != nil {
		return nil, sessionapi.Errorf(sessionapi.ErrFailed, "%v", err)
	}
	l.mu.Lock()
	l.lim, l.info.Limits = lim, lim
	l.mu.Unlock()
	if err := h.record(ctx, l); err != nil {
		h.log.Warn("recording the session's new network failed", "session_id", l.info.ID, "error", err)
	}
	info := l.snapshot()
	info.Egress, _ = nw.Egress(ctx)
	return &info, nil
}
