package sessionhost

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// end ends a session once: its sandbox closed, its calls no longer
// answered, its record saying why. A persistent session is checkpointed
// first.
func (h *Host) end(l *live, reason string) {
	if reason != sessions.EndLost {
		h.checkpointIfDirty(l)
	}
	h.finish(l, func(i *sessions.Info, now time.Time) {
		i.Status, i.EndReason, i.EndedAt = sessions.StatusEnded, reason, &now
	})
}

// finish lets a session go once: its calls no longer answered, its
// sandbox closed, and its record marked (nil: left as it is).
func (h *Host) finish(l *live, mark func(*sessions.Info, time.Time)) {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	l.ended = true
	if mark != nil {
		mark(&l.info, time.Now().UTC())
	}
	why, ended := l.info.EndReason, l.info.Status == sessions.StatusEnded
	if why == "" {
		why = l.info.Status // paused, or handed on
	}
	l.mu.Unlock()
	if ended {
		h.keepCells(l)
	}
	if l.sub != nil {
		_ = l.sub.Unsubscribe()
	}
	l.ptys.closeAll(why)
	l.conns.closeAll(why)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l.sb.Close(ctx)
	if mark != nil {
		if err := h.record(ctx, l); err != nil {
			h.log.Warn("recording a session's end failed", "session_id", l.info.ID, "error", err)
		}
	}
	h.mu.Lock()
	delete(h.live, l.info.ID)
	_ = h.listenLocked()
	h.mu.Unlock()
	if ended {
		h.cfg.Observer.Ended(why)
	}
	h.log.Info("session let go", "session_id", l.info.ID, "status", l.info.Status, "reason", l.info.EndReason)
}

// expire ends the sessions idle past their timeout or at their lifetime,
// and writes the last call's time of those whose record is behind.
func (h *Host) expire(now time.Time) {
	h.mu.Lock()
	h.forgetCellsLocked(now)
	ls := make([]*live, 0, len(h.live))
	for _, l := range h.live {
		ls = append(ls, l)
	}
	h.mu.Unlock()
	for _, l := range ls {
		l.mu.Lock()
		// A call in flight is activity, however long it runs (an exec's
		// timeout may be past the idle timeout): idle counts from its end.
		idle := l.ck.pending == 0 && now.Sub(l.active) >= l.info.IdleTimeout.D()
		old := !now.Before(l.info.ExpiresAt)
		stale := l.active.Sub(l.recorded) > 10*time.Second
		l.mu.Unlock()
		switch {
		case old:
			h.wg.Go(func() { h.end(l, sessions.EndLifetime) })
		case idle:
			h.wg.Go(func() { h.end(l, sessions.EndIdle) })
		case stale:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if errors.Is(h.record(ctx, l), errTakenOver) {
				h.wg.Go(func() { h.finish(l, nil) })
			}
			cancel()
		case h.idlePoint(l, now):
			h.wg.Go(func() { h.checkpointIdle(l) })
		}
	}
}

func (h *Host) shutdown() {
	h.mu.Lock()
	h.closed = true
	_ = h.listenLocked()
	ls := make([]*live, 0, len(h.live))
	for _, l := range h.live {
		ls = append(ls, l)
	}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Go(func() {
			if l.info.Persist {
				// Checkpointed and let go, its record still running: the
				// next call resumes it on another worker.
				h.checkpointIfDirty(l)
				h.finish(l, nil)
				return
			}
			h.end(l, sessions.EndShutdown)
		})
	}
	wg.Wait()
	h.wg.Wait()
	h.forgetAllCells()
}

// errEnded: a call that reached a session as it ended.
var errEnded = errors.New("session ended")
