package worker

import (
	"bytes"
	"io"
	"os"
)

// spoolMemory is how much of a snapshot or an archive a spool keeps in
// memory before it spills to a file: small workspaces, the common case,
// never touch the disk.
const spoolMemory = 4 << 20

// spool holds the bytes of a snapshot or an archive while a job runs: in
// memory up to spoolMemory, past it in a temporary file, unlinked at once
// so that nothing is left behind when the worker dies.
type spool struct {
	dir string
	mem bytes.Buffer
	f   *os.File
	n   int64
}

func (s *spool) Write(p []byte) (int, error) {
	if s.f == nil && s.mem.Len()+len(p) > spoolMemory {
		f, err := tempFile(s.dir)
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

// reset empties the spool for another run.
func (s *spool) reset() error {
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

// reader reads the first n bytes, from the start, however often it is
// called.
func (s *spool) reader(n int64) io.Reader {
	if s.f != nil {
		return io.NewSectionReader(s.f, 0, n)
	}
	return bytes.NewReader(s.mem.Bytes()[:min(n, int64(s.mem.Len()))])
}

// memory returns the first n bytes when the spool holds them in memory.
func (s *spool) memory(n int64) ([]byte, bool) {
	if s == nil || s.f != nil || int64(s.mem.Len()) < n {
		return nil, false
	}
	return s.mem.Bytes()[:n], true
}

func (s *spool) close() {
	if s != nil && s.f != nil {
		s.f.Close()
	}
}

// tempFile returns a temporary file already unlinked.
func tempFile(dir string) (*os.File, error) {
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
