package executor

import (
	"io"
	"sync"

	"github.com/sandfleet/sandfleet/internal/envelope"
)

// maxDiagBytes bounds what is kept of the container's stderr, where the
// launcher speaks only before it has a seal (an envelope it could not read).
const maxDiagBytes = 4 << 10

// capture takes a sandbox's attach stream apart: the launcher's frames on
// the container's stdout become the job's two streams, each kept up to the
// output cap and counted beyond it, and the trailer; the container's stderr
// is kept a little, for the error message. Its memory is bounded whatever
// the sandbox writes.
//
// It signals over, once, when either stream passes the cap, and closes
// ended when the trailer arrived or the framing broke: after either,
// nothing more on the stream can be the job's. The attach copy writes while
// the executor reads the flags, hence the mutex; the buffers are read only
// after the copy ended.
type capture struct {
	mu             sync.Mutex
	frames         envelope.Deframer
	stdout, stderr stream
	trailer        []byte
	diag           []byte
	limit          int64
	over           chan<- struct{}
	fired          bool
	ended          chan struct{}
	closed         bool
	onOutput       func(kind byte, p []byte) // set at the hand-off; nil for none
	session        func(kind byte, p []byte) // a session's agent's frames; nil for a job
	archive        *archiveSink              // set at the hand-off when the job asked for an archive

	// The compile step's output, kept up to limit and counted, and the
	// case reports, kept up to maxCases and digested (all of them).
	compile  stream
	cases    [][]byte
	maxCases int
	caseSum  envelope.CaseDigest

	// The display outputs: the one being framed, those complete (up to
	// the launcher's bounds), and the digest of all their frames.
	display     []byte
	displays    [][]byte
	displayKept int
	displaySum  envelope.DisplayDigest
}

// maxDisplayKept bounds what capture keeps of display outputs: the
// launcher's bytes, their types' names and a frame of slack.
const maxDisplayKept = envelope.MaxDisplayBytes + envelope.MaxDisplays*64 + envelope.MaxFramePayload

// stream is one of the job's streams: the first limit bytes, and a count.
type stream struct {
	buf []byte
	n   int64
}

func (s *stream) add(p []byte, limit int64) {
	s.n += int64(len(p))
	if room := limit - int64(len(s.buf)); room > 0 {
		s.buf = append(s.buf, p[:min(room, int64(len(p)))]...)
	}
}

func newCapture(limit int64, over chan<- struct{}) *capture {
	c := &capture{limit: limit, over: over, ended: make(chan struct{})}
	c.frames.Handle = c.frame
	return c
}

// frame is called by the deframer, under c.mu.
func (c *capture) frame(kind byte, p []byte) {
	switch kind {
	case envelope.FrameStdout:
		c.stdout.add(p, c.limit)
	case envelope.FrameStderr:
		c.stderr.add(p, c.limit)
	case envelope.FrameTrailer:
		c.trailer = append([]byte(nil), p...)
		c.end()
		return
	case envelope.FrameCompile:
		c.compile.add(p, c.limit)
		return
	case envelope.FrameCase:
		c.caseSum.Add(p)
		if len(c.cases) < c.maxCases {
			c.cases = append(c.cases, append([]byte(nil), p...))
		}
		return
	case envelope.FrameReplyPart, envelope.FrameReply, envelope.FrameEvent:
		if c.session != nil {
			c.session(kind, p)
		}
		return
	case envelope.FrameDisplayPart, envelope.FrameDisplay:
		c.displaySum.Add(kind, p)
		if c.displayKept+len(p) <= maxDisplayKept {
			c.display = append(c.display, p...)
			c.displayKept += len(p)
		}
		if kind == envelope.FrameDisplay {
			if len(c.displays) < envelope.MaxDisplays {
				c.displays = append(c.displays, c.display)
			}
			c.display = nil
		}
		return
	case envelope.FrameArchive:
		if c.session != nil { // a session's checkpoint (Session.Archive)
			c.session(kind, p)
			return
		}
		if c.archive == nil {
			c.archive = newArchiveSink(io.Discard, 0) // counted, so that the trailer cannot agree
		}
		c.archive.add(p)
		return
	}
	if c.onOutput != nil {
		c.onOutput(kind, p)
	}
	if (c.stdout.n > c.limit || c.stderr.n > c.limit) && !c.fired {
		c.fired = true
		select {
		case c.over <- struct{}{}:
		default:
		}
	}
}

func (c *capture) end() {
	if !c.closed {
		c.closed = true
		close(c.ended)
	}
}

// stdoutWriter is where the attach copy writes the container's stdout.
func (c *capture) stdoutWriter() writerFunc {
	return func(p []byte) (int, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		n, _ := c.frames.Write(p)
		if c.frames.Err() != nil {
			c.end()
		}
		return n, nil
	}
}

// stderrWriter is where the attach copy writes the container's stderr.
func (c *capture) stderrWriter() writerFunc {
	return func(p []byte) (int, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if room := maxDiagBytes - len(c.diag); room > 0 {
			c.diag = append(c.diag, p[:min(room, len(p))]...)
		}
		return len(p), nil
	}
}

// watch sets what is told of the job's output as it arrives, from the
// attach copy's goroutine: it must not block.
func (c *capture) watch(onOutput func(kind byte, p []byte)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onOutput = onOutput
}

// serveSession sends the agent's replies and events to fn, from the
// attach copy's goroutine, before the session's envelope is handed over.
func (c *capture) serveSession(fn func(kind byte, p []byte)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.session = fn
}

// trailerBytes is the trailer's payload, nil before it came.
func (c *capture) trailerBytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trailer
}

// expectCases sets how many case reports are kept, before the hand-off:
// the job's cases; any more void the verdict through the digest's count.
func (c *capture) expectCases(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.maxCases = n
}

// keepArchive sets where the archive frames go, before the hand-off.
func (c *capture) keepArchive(a *archiveSink) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.archive = a
}

// frameErr reports whether the framing broke, and why.
func (c *capture) frameErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frames.Err()
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

var _ io.Writer = writerFunc(nil)
