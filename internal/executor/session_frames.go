package executor

// A session's stream: the agent's frames (events, archive parts, signed
// replies assembled from their parts) and the requests written to it.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/sandfleet/sandfleet/internal/envelope"
)

// end closes the session once its sandbox's stream ended: the reason its
// agent's trailer gives, and every call still waiting told.
func (ss *Session) end() {
	ss.endedOnce.Do(func() {
		trailer := ss.s.out.trailerBytes() // before ss.mu: frame holds the capture's lock, then takes ss.mu
		ss.mu.Lock()
		if t, ok := ss.seal.Open(trailer); ok {
			ss.why = t.Error
		}
		if ss.lie {
			ss.why = "broken"
		}
		for id, ch := range ss.waiting {
			close(ch)
			delete(ss.waiting, id)
		}
		ss.mu.Unlock()
		close(ss.ended)
	})
}

// frame takes the agent's session frames, from the stream's goroutine.
func (ss *Session) frame(kind byte, p []byte) {
	switch kind {
	case envelope.FrameEvent:
		ev, err := ss.seal.OpenEvent(p)
		if err != nil {
			ss.broken(err)
			return
		}
		if ss.spec.OnEvent != nil {
			ss.spec.OnEvent(ev)
		}
	case envelope.FrameArchive:
		ss.mu.Lock()
		if ss.sink != nil {
			ss.sink.add(p)
		}
		ss.mu.Unlock()
	case envelope.FrameReplyPart, envelope.FrameReply:
		ss.mu.Lock()
		if len(p) >= 8 {
			if _, ok := ss.waiting[binary.BigEndian.Uint64(p)]; !ok {
				// Nobody waits for it (a call given up on): not kept, so
				// that parts no reply will finish cannot pile up.
				ss.asm.Drop(binary.BigEndian.Uint64(p))
				ss.mu.Unlock()
				return
			}
		}
		id, msg, done, err := ss.asm.Add(p, kind == envelope.FrameReply)
		if err != nil {
			ss.mu.Unlock()
			ss.broken(err)
			return
		}
		if !done {
			ss.mu.Unlock()
			return
		}
		r, err := ss.seal.OpenReply(msg)
		if err == nil && r.ID != id {
			err = fmt.Errorf("reply %d framed as %d", r.ID, id)
		}
		if err != nil {
			ss.mu.Unlock()
			ss.broken(err)
			return
		}
		defer ss.mu.Unlock()
		if ch, ok := ss.waiting[id]; ok {
			delete(ss.waiting, id)
			ch <- r
		}
	}
}

// broken ends the session on the first frame its agent did not sign:
// something else in the sandbox writes to the container's stdout (gVisor
// lets a process of the agent's uid open it through /proc/1/fd), so the
// stream is no longer the agent's alone. Nothing unsigned passes, but
// its replies may be cut by what is written between them, and a
// sandbox must not fill its worker's log with a warning a frame.
func (ss *Session) broken(err error) {
	ss.brokeOnce.Do(func() {
		ss.log.Warn("a session frame failed its check: ending the session", "error", err)
		ss.mu.Lock()
		ss.lie = true
		ss.mu.Unlock()
		go ss.end()
	})
}

// Do sends req to the session's agent and waits for its reply. req.ID is
// set by Do.
func (ss *Session) Do(ctx context.Context, req *envelope.Request) (*envelope.Reply, error) {
	ch := make(chan *envelope.Reply, 1)
	ss.mu.Lock()
	select {
	case <-ss.ended:
		ss.mu.Unlock()
		return nil, ErrSessionEnded
	default:
	}
	ss.next++
	id := ss.next
	ss.waiting[id] = ch
	ss.mu.Unlock()
	r := *req
	r.ID = id
	if err := ss.send(&r); err != nil {
		ss.forget(id)
		return nil, err
	}
	select {
	case rep, ok := <-ch:
		if !ok {
			return nil, ErrSessionEnded
		}
		return unprotected(&r, rep), nil
	case <-ctx.Done():
		ss.forget(id)
		return nil, ctx.Err()
	}
}

func (ss *Session) forget(id uint64) {
	ss.mu.Lock()
	delete(ss.waiting, id)
	ss.mu.Unlock()
}

func (ss *Session) send(req *envelope.Request) error {
	msg, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if len(msg) > envelope.MaxMessageBytes {
		return fmt.Errorf("%w: a request of %d bytes, over %d", ErrRejected, len(msg), envelope.MaxMessageBytes)
	}
	b := envelope.AppendMessage(nil, envelope.FrameRequestPart, envelope.FrameRequest, req.ID, msg)
	ss.writeMu.Lock()
	defer ss.writeMu.Unlock()
	if _, err := ss.s.att.Conn.Write(b); err != nil {
		return fmt.Errorf("%w: %w", ErrSessionEnded, err)
	}
	return nil
}
