package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// sseEvent is the data of one Server-Sent Event: the job's event as
// jobs.Event carries it, and for output its bytes as text (the clients'
// `stream` reads that; `data` and `encoding` keep the exact bytes).
type sseEvent struct {
	*jobs.Event
	Text string `json:"text,omitempty"`
}

// follow streams a job's events as Server-Sent Events (jobs.Client.Follow):
// from its start, or after the sequence in Last-Event-ID, until the job has
// finished, the last event carrying its result. A resumed stream leaves
// out queued and ends with finished even when the client had it. Output events are named
// after their stream (stdout, stderr), the others after their type.
func (g *Gateway) follow(w http.ResponseWriter, r *http.Request, tok *Token) error {
	id, err := g.pathJob(r, tok)
	if err != nil {
		return err
	}
	var after uint64
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return apiErr(http.StatusBadRequest, CodeInvalidRequest, "Last-Event-ID %q is not an event's sequence", v)
		}
		after = n
	}
	release, err := g.take(g.streams, tok)
	if err != nil {
		return err
	}
	defer release()
	out := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: g.cfg.WriteTimeout}
	started := false
	for ev, err := range g.views.of(tok).Client().Follow(r.Context(), id) {
		if err != nil {
			if !started {
				return err // before the answer: a JSON error (404 for an unknown job)
			}
			g.log.Warn("following a job ended early", "job_id", id, "error", err)
			return nil
		}
		switch {
		case ev.Type == jobs.EventFinished:
			// Always: a client resuming after it still hears the end,
			// else its EventSource would reconnect for ever.
		case after > 0 && ev.Seq == 0:
			continue // queued (Follow's own): before all the client saw
		case ev.Seq != 0 && ev.Seq <= after:
			continue
		}
		if !started {
			started = true
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
			w.Header().Set("X-Accel-Buffering", "no")
			w.WriteHeader(http.StatusOK)
		}
		if err := out.write(ev); err != nil {
			return nil // the client left
		}
	}
	return nil
}

// sseWriter writes events to a streamed answer, each flushed at once and
// under a deadline of its own, as lineWriter does for batches.
type sseWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (s *sseWriter) write(ev *jobs.Event) error {
	name := string(ev.Type)
	data := sseEvent{Event: ev}
	if ev.Type == jobs.EventOutput {
		name = string(ev.Stream)
		data.Text = string(ev.DataBytes())
	}
	body, err := json.Marshal(data)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	msg := "event: " + name + "\n"
	if ev.Seq != 0 {
		msg += "id: " + strconv.FormatUint(ev.Seq, 10) + "\n"
	}
	if _, err := fmt.Fprintf(s.w, "%sdata: %s\n\n", msg, body); err != nil {
		return err
	}
	return s.rc.Flush()
}
