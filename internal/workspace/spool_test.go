package workspace

import (
	"bytes"
	"io"
	"testing"
)

// A spool keeps small contents in memory and spills large ones to an
// unlinked file; either way it reads back what was written, from the
// start, as often as asked, and empties for another run.
func TestSpool(t *testing.T) {
	t.Parallel()
	for _, size := range []int{0, 1000, SpoolMemory, SpoolMemory + 1, 3*SpoolMemory + 7} {
		s := &Spool{Dir: t.TempDir()}
		data := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 100_000)
			if _, err := s.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		if spilled := s.Spilled(); spilled != (size > SpoolMemory) {
			t.Errorf("%d bytes: spilled %v", size, spilled)
		}
		for range 2 {
			got, err := io.ReadAll(s.Reader(s.Len()))
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%d bytes: read %d, %v", size, len(got), err)
			}
		}
		if err := s.Reset(); err != nil {
			t.Fatal(err)
		}
		s.Write([]byte("again"))
		if got, _ := io.ReadAll(s.Reader(s.Len())); string(got) != "again" {
			t.Fatalf("%d bytes, after reset: %q", size, got)
		}
		s.Close()
	}
}
