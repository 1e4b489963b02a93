package batch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"

	"github.com/sandfleet/sandfleet/internal/field"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// scan reads input line by line and calls fn with each non-blank line's
// job (its ID derived when it has none, its queue defaulted) or the reason
// it is bad. It stops at fn's first error.
func (r *Runner) scan(input io.Reader, fn func(line int, job *jobs.Job, err error) error) error {
	br := bufio.NewReaderSize(input, 64<<10)
	ids := newLineIDs(r.cfg.Name)
	var buf []byte
	for n := 1; ; n++ {
		line, tooLong, err := readLine(br, &buf, r.cfg.MaxLineBytes)
		if n == 1 {
			// A file some editors save as UTF-8 starts with a byte order
			// mark, which is no JSON.
			line = bytes.TrimPrefix(line, []byte("\uFEFF"))
		}
		if errors.Is(err, io.EOF) && len(line) == 0 && !tooLong {
			return nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if len(bytes.TrimSpace(line)) == 0 && !tooLong {
			continue
		}
		var job *jobs.Job
		var bad error
		if tooLong {
			bad = fmt.Errorf("%w: line longer than %d bytes", jobs.ErrInvalidJob, r.cfg.MaxLineBytes)
		} else {
			job, bad = r.parse(line, ids)
		}
		if bad == nil {
			if first, ok := ids.claim(job.ID, n); !ok {
				bad = fmt.Errorf("%w: id %q is also the id of line %d%s", jobs.ErrInvalidJob, job.ID, first, r.orItsRetries())
			}
		}
		// With RetryErrors a line's retries take IDs of their own
		// (RetryID): no other line may have one of them, or the two would
		// share a result.
		for k := 1; bad == nil && r.cfg.RetryErrors && k <= MaxRetries; k++ {
			if first, ok := ids.claim(RetryID(job.ID, k), n); !ok {
				bad = fmt.Errorf("%w: the id of its retry %d, %q, is also the id of line %d or of one of its retries", jobs.ErrInvalidJob, k, RetryID(job.ID, k), first)
			}
		}
		if bad != nil {
			job = nil
		}
		if err := fn(n, job, bad); err != nil {
			return err
		}
	}
}

// readLine reads one line into *buf without its newline. A line over max
// bytes is consumed whole but not kept: tooLong reports it.
func readLine(br *bufio.Reader, buf *[]byte, max int) (line []byte, tooLong bool, err error) {
	*buf = (*buf)[:0]
	for {
		frag, err := br.ReadSlice('\n')
		if !tooLong {
			if len(*buf)+len(frag) > max+2 { // +2: the newline, maybe CRLF
				tooLong = true
				*buf = (*buf)[:0]
			} else {
				*buf = append(*buf, frag...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line = bytes.TrimSuffix(*buf, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) > max {
			line, tooLong = nil, true
		}
		if cap(*buf) > 1<<20 && len(*buf) < 64<<10 {
			*buf = nil // do not keep one huge line's buffer for the rest
		}
		return line, tooLong, err
	}
}

// parse decodes and validates one line and gives it its ID.
func (r *Runner) parse(line []byte, ids *lineIDs) (*jobs.Job, error) {
	job, err := jobs.Decode(line, r.cfg.MaxLineBytes)
	if err != nil {
		return nil, err
	}
	if job.ID == "" {
		canonical, err := json.Marshal(job)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", jobs.ErrInvalidJob, err)
		}
		job.ID = ids.derive(canonical)
	}
	if job.Queue == "" {
		job.Queue = r.cfg.Queue
	}
	// The batch's name goes on each job (after the ID is derived, which it
	// so does not change): the job index files it under its batch, and the
	// console reports on it. It is a reserved label, which MaxLabels does
	// not count.
	// A line's own sandfleet.* labels are dropped: those are the fleet's,
	// and one naming another batch would count this job in its report.
	labels := maps.Clone(job.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.DeleteFunc(labels, func(k, _ string) bool { return strings.HasPrefix(k, field.ReservedLabels) })
	labels[jobs.BatchLabel] = r.cfg.Name
	job.Labels = labels
	if r.cfg.Amend != nil {
		if err := r.cfg.Amend(job); err != nil {
			return nil, err
		}
	}
	if _, _, err := jobs.Encode(job, r.cfg.MaxLineBytes); err != nil {
		return nil, err
	}
	return job, nil
}

// orItsRetries completes "is also the id of line N" when lines' retries
// hold IDs too.
func (r *Runner) orItsRetries() string {
	if r.cfg.RetryErrors {
		return " or of one of its retries (--retry errors)"
	}
	return ""
}
