package executor

import (
	"bytes"
	"sync"

	"github.com/sandfleet/sandfleet/internal/envelope"
)

// capture keeps the first keep bytes written to it and counts the rest.
// When the count first passes limit it signals over, once, and keeps
// accepting (and dropping) bytes, so that the other stream of the
// multiplexed attach keeps flowing until the container is killed. Its memory
// is bounded by keep whatever the job writes.
//
// Once watchEnd named the job's seal, the capture also signals end, once,
// when what it kept ends with a trailer that checks under the seal. The
// seal is set by the goroutine handing the job over while the copy
// goroutine writes, hence the mutex; buf is read only after the copy ended.
type capture struct {
	mu    sync.Mutex
	buf   []byte
	keep  int
	limit int64
	n     int64
	over  chan<- struct{}
	fired bool

	seal   *envelope.Seal
	stream envelope.Stream
	end    chan<- struct{}
	ended  bool
}

func newCapture(keep int, limit int64, over chan<- struct{}) *capture {
	return &capture{keep: keep, limit: limit, over: over}
}

// watchEnd makes the capture signal end when it holds the whole of stream
// ending with a trailer that checks under seal.
func (c *capture) watchEnd(seal envelope.Seal, stream envelope.Stream, end chan<- struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seal, c.stream, c.end = &seal, stream, end
	c.checkEnd()
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += int64(len(p))
	if room := c.keep - len(c.buf); room > 0 {
		c.buf = append(c.buf, p[:min(room, len(p))]...)
	}
	if c.n > c.limit && !c.fired {
		c.fired = true
		select {
		case c.over <- struct{}{}:
		default:
		}
	}
	c.checkEnd()
	return len(p), nil
}

func (c *capture) checkEnd() {
	if c.seal == nil || c.ended || int64(len(c.buf)) != c.n || !bytes.HasSuffix(c.buf, []byte("\n")) {
		return
	}
	// The marker in the tail is a cheap test before the MAC is checked.
	tail := c.buf[max(0, len(c.buf)-envelope.MaxTrailerBytes):]
	if !bytes.Contains(tail, c.seal.Marker()) {
		return
	}
	if _, _, ok := c.seal.Cut(c.buf, c.stream); !ok {
		return
	}
	c.ended = true
	select {
	case c.end <- struct{}{}:
	default:
	}
}

// exceeded reports whether more than limit bytes were written.
func (c *capture) exceeded() bool { return c.n > c.limit }
