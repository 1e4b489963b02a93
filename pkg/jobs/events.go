package jobs

import (
	"encoding/base64"
	"time"
	"unicode/utf8"
)

// EventType says what an Event reports.
type EventType string

// The event types. A watcher should skip types it does not know: a newer
// worker may publish more.
const (
	// EventQueued: the job is in the queue. Follow makes it from the job's
	// message in JOBS (or the result's queued_at); it is never published,
	// so nobody but a worker writes into a job's events. Attempt 0.
	EventQueued EventType = "queued"
	// EventRedelivered: a worker took the job again (attempt > 1): the
	// previous attempt's worker was lost or handed it back. What follows
	// is the new attempt, from its start.
	EventRedelivered EventType = "redelivered"
	// EventStarted: the job was handed to its sandbox (Worker, Container).
	// Output offsets count from here: a second started in one attempt (the
	// engine failed, the job runs again) starts the output over.
	EventStarted EventType = "started"
	// EventOutput: a piece of stdout or stderr (Stream, Offset, Data).
	EventOutput EventType = "output"
	// EventGap: Bytes bytes of Stream from Offset were not published: the
	// broker was slower than the job. The result has them.
	EventGap EventType = "gap"
	// EventOutputTruncated: nothing more of Stream, from Offset, is
	// published in this attempt: it reached the job's output cap (the job
	// is killed as output_limit) or the attempt's share of the stream.
	EventOutputTruncated EventType = "output_truncated"
	// EventTimeout, EventOOM and EventCanceled: the sandbox was killed, and
	// why (Error). The finished event follows.
	EventTimeout  EventType = "timeout"
	EventOOM      EventType = "oom"
	EventCanceled EventType = "canceled"
	// EventFinished: the result is stored; the last event of a job. As
	// published, Result has no stdout and stderr (the output events carry
	// them); Follow yields the whole stored result instead.
	EventFinished EventType = "finished"
)

// Event is one entry of a job's event stream, as published on
// events.<id> (one JSON object per message) and as Follow yields it. Only
// the fields of its Type are set.
type Event struct {
	Type    EventType `json:"type"`
	ID      string    `json:"id"`
	Attempt int       `json:"attempt"`       // the delivery the event belongs to; 0 for queued
	Time    time.Time `json:"time,omitzero"` // absent only in a tenant's queued event (see Follow)
	// Seq is the event's sequence in the stream, set by Follow (0 for the
	// events Follow makes itself: queued, and a finished read from RESULTS).
	Seq uint64 `json:"seq,omitempty"`

	// output, gap, output_truncated
	Stream Stream `json:"stream,omitempty"`
	Offset int64  `json:"offset,omitempty"` // of the first byte, in the stream of this attempt; absent means 0
	// output: the bytes, as text, or in base64 when Encoding says so
	// (output that is not UTF-8, or that JSON would blow up). Use DataBytes.
	Data     string `json:"data,omitempty"`
	Encoding string `json:"encoding,omitempty"`
	// gap: how many bytes were not published.
	Bytes int64 `json:"bytes,omitempty"`

	// started
	Worker    string     `json:"worker,omitempty"`
	Container string     `json:"container,omitempty"`
	QueuedAt  *time.Time `json:"queued_at,omitempty"`

	// timeout, oom, canceled
	Error string `json:"error,omitempty"`

	// finished
	Result *Result `json:"result,omitempty"`
}

// DataBytes returns an output event's bytes as the job wrote them.
func (e *Event) DataBytes() []byte { return decodeStream(e.Data, e.Encoding) }

// SetData stores p as the event's data: as text when it is UTF-8 and JSON
// text takes no more than base64 would, else in base64; so an event never
// takes more than 4/3 of its bytes plus its fields (a line of control
// characters would take six times its size as JSON text).
func (e *Event) SetData(p []byte) {
	if utf8.Valid(p) && textCost(p) <= base64.StdEncoding.EncodedLen(len(p)) {
		e.Data, e.Encoding = string(p), ""
		return
	}
	e.Data, e.Encoding = base64.StdEncoding.EncodeToString(p), EncodingBase64
}

// textCost is the size of valid UTF-8 p as a JSON string's contents,
// written by an encoder without HTML escaping (the workers', internal/records).
func textCost(p []byte) int {
	n := len(p)
	for i := 0; i < len(p); {
		c := p[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
				n++
			case c < 0x20:
				n += 5 // \u00XX
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(p[i:])
		if r == '\u2028' || r == '\u2029' {
			n += 6 - size
		}
		i += size
	}
	return n
}
