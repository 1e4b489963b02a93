package executor

// capture keeps the first keep bytes written to it and counts the rest.
// When the count first passes limit it signals over, once, and keeps
// accepting (and dropping) bytes, so that the other stream of the
// multiplexed attach keeps flowing until the container is killed. Its memory
// is bounded by keep whatever the job writes.
type capture struct {
	buf   []byte
	keep  int
	limit int64
	n     int64
	over  chan<- struct{}
	fired bool
}

func newCapture(keep int, limit int64, over chan<- struct{}) *capture {
	return &capture{keep: keep, limit: limit, over: over}
}

func (c *capture) Write(p []byte) (int, error) {
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
	return len(p), nil
}

// exceeded reports whether more than limit bytes were written.
func (c *capture) exceeded() bool { return c.n > c.limit }
