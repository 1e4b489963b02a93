package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/sandfleet/sandfleet/pkg/batch"
)

// resultSink writes results as JSONL, each line with one write of a
// complete line: an interrupted run leaves whole lines only. A run whose
// OUT already holds results (a rerun) writes them beside it and puts them
// in its place at the end: an interrupted rerun, which may have written
// fewer than the run before, does not throw those away.
type resultSink struct {
	path    string // "" writes nowhere, "-" to stdout
	stdout  io.Writer
	visible bool // stdout is a terminal: visibleJSON
	w       io.Writer
	f       *os.File
	// progress, when set, is the terminal stderr whose live line (drawn
	// under mu) a result on the same terminal clears first.
	progress io.Writer
	mu       *sync.Mutex
	opened   bool // OUT is a file, opened
	aside    bool // f is a file beside path, renamed over it by close
	lines    int  // results written
	buf      []byte
}

func (s *resultSink) open() error {
	switch s.path {
	case "":
		s.w = io.Discard
	case "-":
		s.w = s.stdout
	default:
		s.visible = false
		var f *os.File
		var err error
		if st, serr := os.Stat(s.path); serr == nil && st.Mode().IsRegular() && st.Size() > 0 {
			dir, base := filepath.Split(s.path)
			if dir == "" {
				dir = "." // beside OUT, not in $TMPDIR: renamed over it at the end
			}
			if f, err = os.CreateTemp(dir, "."+base+".*.partial"); err == nil {
				err = f.Chmod(st.Mode().Perm())
			}
			s.aside = true
		} else {
			f, err = os.OpenFile(s.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		}
		if f != nil {
			s.f, s.w, s.opened = f, f, true
		}
		if err != nil {
			return fmt.Errorf("%w: %w", errSink, err)
		}
	}
	return nil
}

func (s *resultSink) write(o batch.Outcome) error {
	res := *o.Result
	labels := make(map[string]string, len(res.Labels)+1)
	for k, v := range res.Labels {
		labels[k] = v
	}
	labels["batch_line"] = strconv.Itoa(o.Line)
	res.Labels = labels
	data, err := json.Marshal(&res)
	if err != nil {
		return fmt.Errorf("%w: %w", errSink, err)
	}
	if s.visible {
		data = visibleJSON(data)
	}
	s.buf = append(append(s.buf[:0], data...), '\n')
	if s.progress != nil && s.visible {
		s.mu.Lock()
		defer s.mu.Unlock()
		fmt.Fprint(s.progress, "\r\033[K")
	}
	if _, err := s.w.Write(s.buf); err != nil {
		return fmt.Errorf("%w: %w", errSink, err)
	}
	s.lines++
	if cap(s.buf) > 1<<20 {
		s.buf = nil
	}
	return nil
}

// close flushes the results to OUT. A rerun's results take OUT's place
// when the run finished or wrote at least as many as OUT holds; kept
// reports that OUT was left as it was instead (this run's results are in
// RESULTS, and the next run writes them again).
func (s *resultSink) close(finished bool) (kept bool, err error) {
	if s.f == nil {
		return false, nil
	}
	f := s.f
	s.f = nil
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if !s.aside {
		return false, err
	}
	if err == nil && !finished && holdsMoreLines(s.path, s.lines) {
		return true, os.Remove(f.Name())
	}
	if err == nil {
		err = os.Rename(f.Name(), s.path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return false, err
}

// holdsMoreLines reports whether the file at path holds more than n lines,
// reading no further than it takes to tell (OUT may be large).
func holdsMoreLines(path string, n int) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	lines := 0
	for {
		k, err := f.Read(buf)
		lines += bytes.Count(buf[:k], []byte("\n"))
		if lines > n {
			return true
		}
		if err != nil {
			return false
		}
	}
}
