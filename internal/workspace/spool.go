package workspace

import (
	"bytes"
	"io"
	"os"
)

// SpoolMemory is how much of a snapshot or an archive a spool keeps in
// memory before it spills to a file: small workspaces, the common case,
// never touch the disk.
const SpoolMemory = 4 << 20

// Spool holds the bytes of a snapshot or an archive while a job runs or a
// session checkpoints: in memory up to SpoolMemory, past it in a
// temporary file in Dir, unlinked at once so that nothing is left behind
// when the worker dies.
type Spool struct {
	Dir string
	mem bytes.Buffer
	f   *os.File
	n   int64
}

func (s *Spool) Write(p []byte) (int, error) {
	if s.f == nil && s.mem.Len()+len(p) > SpoolMemory {
		f, err := TempFile(s.Dir)
		if err != nil {
			return 0, err
		}
		if _, err := f.Write(s.mem.Bytes()); err != nil {
			f.Close()
			return 0, err
		}
		s.f = f
		s.mem = bytes.Buffer{}
	}
	var n int
	var err error
	if s.f != nil {
		n, err = s.f.Write(p)
	} else {
		n, err = s.mem.Write(p)
	}
	s.n += int64(n)
	return n, err
}

// Len is how many bytes were written since the last Reset.
func (s *Spool) Len() int64 { return s.n }

// Reset empties the spool for another run.
func (s *Spool) Reset() error {
	s.n = 0
	s.mem.Reset()
	if s.f != nil {
		if err := s.f.Truncate(0); err != nil {
			return err
		}
		_, err := s.f.Seek(0, io.SeekStart)
		return err
	}
	return nil
}

// Reader reads the first n bytes, from the start, however often it is
// called.
func (s *Spool) Reader(n int64) io.Reader {
	if s.f != nil {
		return io.NewSectionReader(s.f, 0, n)
	}
	return bytes.NewReader(s.mem.Bytes()[:min(n, int64(s.mem.Len()))])
}

// Memory returns the first n bytes when the spool holds them in memory.
func (s *Spool) Memory(n int64) ([]byte, bool) {
	if s == nil || s.f != nil || int64(s.mem.Len()) < n {
		return nil, false
	}
	return s.mem.Bytes()[:n], true
}

// Spilled reports whether the spool went to its file.
func (s *Spool) Spilled() bool { return s != nil && s.f != nil }

// Close removes the spool's file, if it has one.
func (s *Spool) Close() {
	if s != nil && s.f != nil {
		s.f.Close()
	}
}

// TempFile returns a temporary file in dir ("": os.TempDir()), already
// unlinked: a worker that dies leaves nothing behind. A file that cannot
// be unlinked is not used.
func TempFile(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, "sandfleet-ws-")
	if err != nil {
		return nil, err
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
