package envelope

import (
	"encoding/binary"
	"fmt"
)

// Everything the launcher writes after the envelope goes to the container's
// stdout as frames: a kind byte, a 4-byte big-endian length and that many
// bytes of payload. The job's stdout and stderr, whatever else a job
// produces (a workspace's archive), and at the very end the signed trailer
// each have a kind. The job never holds the container's streams, so every
// frame is the launcher's; bytes that break the framing, or frames after
// the trailer, void the verdict.
//
// The container's stderr carries only what the launcher says before it has
// a seal (an envelope it could not read); the executor keeps a little of it
// for the error message.
const (
	FrameStdout  byte = 'o' // the job's stdout
	FrameStderr  byte = 'e' // the job's stderr
	FrameArchive byte = 'a' // a tar archive the launcher made (workspaces)
	FrameCompile byte = 'c' // the compile step's output, stdout and stderr as one
	FrameCase    byte = 'r' // one test case's CaseReport, JSON
	FrameTrailer byte = 't' // the signed trailer: the last frame
)

func knownKind(kind byte) bool {
	switch kind {
	case FrameStdout, FrameStderr, FrameArchive, FrameTrailer, FrameCompile, FrameCase,
		FrameRequestPart, FrameRequest, FrameReplyPart, FrameReply, FrameEvent,
		FrameDisplayPart, FrameDisplay:
		return true
	}
	return false
}

// FrameHeaderBytes is the size of a frame's header.
const FrameHeaderBytes = 5

// MaxFramePayload bounds one frame's payload: the launcher never writes
// more at once, and a decoder refuses more.
const MaxFramePayload = 64 << 10

// AppendFrame appends a frame of kind holding p to dst. p must not be over
// MaxFramePayload.
func AppendFrame(dst []byte, kind byte, p []byte) []byte {
	dst = append(dst, kind)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(p)))
	return append(dst, p...)
}

// Deframer turns the bytes of the container's stdout back into frames, as
// they arrive in pieces of any size. Handle is called for each complete
// frame in order; its payload is valid only during the call.
type Deframer struct {
	Handle func(kind byte, payload []byte)

	buf  []byte // a partial frame
	done bool   // the trailer came
	err  error
}

// Write feeds bytes to the deframer. It never fails, so that the rest of
// the stream is drained; Err tells whether the framing broke.
func (d *Deframer) Write(p []byte) (int, error) {
	n := len(p)
	if d.err != nil {
		return n, nil
	}
	if len(d.buf) > 0 {
		p = append(d.buf, p...)
		d.buf = d.buf[:0]
	}
	for len(p) > 0 {
		if d.done {
			d.err = fmt.Errorf("%w: %d bytes after the trailer", ErrFormat, len(p))
			return n, nil
		}
		if len(p) < FrameHeaderBytes {
			break
		}
		kind, size := p[0], binary.BigEndian.Uint32(p[1:FrameHeaderBytes])
		switch {
		case !knownKind(kind):
			d.err = fmt.Errorf("%w: unknown frame kind %q", ErrFormat, kind)
			return n, nil
		case size > MaxFramePayload:
			d.err = fmt.Errorf("%w: frame of %d bytes, over %d", ErrFormat, size, MaxFramePayload)
			return n, nil
		}
		end := FrameHeaderBytes + int(size)
		if len(p) < end {
			break
		}
		d.Handle(kind, p[FrameHeaderBytes:end])
		d.done = kind == FrameTrailer
		p = p[end:]
	}
	// Keep the partial frame: at most a header and MaxFramePayload bytes.
	d.buf = append(d.buf, p...)
	return n, nil
}

// Err reports whether the framing broke, and why.
func (d *Deframer) Err() error { return d.err }

// Complete reports whether the trailer came and nothing broke the framing.
func (d *Deframer) Complete() bool { return d.done && d.err == nil && len(d.buf) == 0 }
