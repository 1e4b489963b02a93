package records

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sandfleet/sandfleet/internal/shorten"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// EncodeResult encodes r, cutting it in place until the encoding fits
// maxBytes (0: no limit), and says what it cut in r.Cut. A result that
// does not fit cannot be stored, and a job whose result is not stored
// runs again: so whatever a job's own doing can grow (its figures, its
// egress list, its outputs' lists, the escaping of its output, which JSON
// may take six bytes for one) is cut, never the job's verdict.
//
// What goes, in order, until it fits: display outputs (the last first,
// counted in DisplayDropped), the egress list's last entries, the lists
// of what the workspace and the outputs skipped, the artifacts list's
// last entries, then stdout and stderr (each by its share, marked
// truncated), a judged job's texts, and at last everything but the
// verdict, its figures and its record of the workspace step.
func EncodeResult(r *jobs.Result, maxBytes int) ([]byte, error) {
	data, err := encode(r)
	if err != nil || maxBytes <= 0 || len(data) <= maxBytes {
		return data, err
	}
	for _, cut := range []func(r *jobs.Result, size, maxBytes int) bool{
		cutDisplay, cutEgress, cutSkipped, cutArtifacts, cutStreams, cutJudged, cutToVerdict,
	} {
		for len(data) > maxBytes && cut(r, len(data), maxBytes) {
			if data, err = encode(r); err != nil {
				return nil, err
			}
		}
		if len(data) <= maxBytes {
			return data, nil
		}
	}
	return nil, fmt.Errorf("encode result %s: %d bytes with nothing left to cut, over the %d the server takes", r.ID, len(data), maxBytes)
}

func encode(r *jobs.Result) ([]byte, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode result %s: %w", r.ID, err)
	}
	return data, nil
}

// noteRoom is what a line of Cut may take: the lists are cut by this much
// more than their excess, so that the line saying so fits too.
const noteRoom = 256

// note sets the line of r.Cut about field.
func note(r *jobs.Result, field, format string, args ...any) {
	line := field + ": " + fmt.Sprintf(format, args...)
	for i, l := range r.Cut {
		if strings.HasPrefix(l, field+": ") {
			r.Cut[i] = line
			return
		}
	}
	r.Cut = append(r.Cut, line)
}

// fitting returns how many of list's first entries fit in room bytes of
// JSON, and the bytes of the whole list.
func fitting[T any](list []T, room int) (keep, total int) {
	keep = -1
	total = 2 // []
	for i, e := range list {
		b, _ := json.Marshal(e)
		total += len(b) + 1
		if keep < 0 && total > room {
			keep = i
		}
	}
	if keep < 0 {
		keep = len(list)
	}
	return keep, total
}

// cutList keeps the first entries of *list that leave the result within
// maxBytes, and says how many it dropped of how many.
func cutList[T any](r *jobs.Result, list *[]T, field string, size, maxBytes int) bool {
	if len(*list) == 0 {
		return false
	}
	_, total := fitting(*list, 0)
	keep, _ := fitting(*list, total-(size-maxBytes)-noteRoom)
	was := len(*list)
	if keep == was {
		keep-- // the estimate was short: one more goes each round
	}
	*list = (*list)[:keep:keep]
	if keep == 0 {
		*list = nil
	}
	note(r, field, "%d of %d entries dropped to fit the result's limit of %d bytes", was-keep+dropped(r, field), was+dropped(r, field), maxBytes)
	return true
}

// dropped is how many entries of field an earlier round dropped already,
// as its line of r.Cut says.
func dropped(r *jobs.Result, field string) int {
	for _, l := range r.Cut {
		var n, of int
		if _, err := fmt.Sscanf(strings.TrimPrefix(l, field+": "), "%d of %d", &n, &of); err == nil && strings.HasPrefix(l, field+": ") {
			return n
		}
	}
	return 0
}

// cutDisplay drops display outputs, the last first: they are only for
// showing, and one may be most of a result.
func cutDisplay(r *jobs.Result, _, _ int) bool {
	n := len(r.Display)
	if n == 0 {
		return false
	}
	r.Display, r.DisplayDropped = r.Display[:n-1], r.DisplayDropped+1
	if n == 1 {
		r.Display = nil
	}
	return true
}

func cutEgress(r *jobs.Result, size, maxBytes int) bool {
	return cutList(r, &r.Egress, "egress", size, maxBytes)
}

func cutSkipped(r *jobs.Result, size, maxBytes int) bool {
	if len(r.ArtifactsSkipped) > 0 {
		return cutList(r, &r.ArtifactsSkipped, "artifacts_skipped", size, maxBytes)
	}
	if ws := r.Workspace; ws != nil && len(ws.Skipped) > 0 {
		step := *ws // not the caller's: the step may be shared
		n := len(step.Skipped)
		cut := cutList(r, &step.Skipped, "workspace.skipped", size, maxBytes)
		step.SkippedMore += n - len(step.Skipped)
		r.Workspace = &step
		return cut
	}
	return false
}

func cutArtifacts(r *jobs.Result, size, maxBytes int) bool {
	return cutList(r, &r.Artifacts, "artifacts", size, maxBytes)
}

// cutStreams shrinks both streams by the share the encoding is over, so
// that each keeps its fair part; a few rounds converge.
func cutStreams(r *jobs.Result, size, maxBytes int) bool {
	f := float64(maxBytes) / float64(size) * 0.98
	cut := false
	for _, st := range []struct {
		s        *string
		trunc    *bool
		encoding string
	}{{&r.Stdout, &r.StdoutTruncated, r.StdoutEncoding}, {&r.Stderr, &r.StderrTruncated, r.StderrEncoding}} {
		if n := int(float64(len(*st.s)) * f); n < len(*st.s) {
			if st.encoding == jobs.EncodingBase64 {
				n -= n % 4 // whole base64 quanta, so that it still decodes
			}
			*st.s, *st.trunc, cut = shorten.Cut(*st.s, n), true, true
		}
	}
	return cut
}

func cutJudged(r *jobs.Result, _, _ int) bool { return shrinkJudged(r) }

// maxKeptError is what the last resort keeps of the result's error.
const maxKeptError = 4 << 10

// cutToVerdict is the last resort: the result keeps its verdict, its
// figures, its labels and its workspace step (without its skipped list),
// and says it lost the rest.
func cutToVerdict(r *jobs.Result, _, _ int) bool {
	for _, l := range r.Cut {
		if strings.HasPrefix(l, "result: ") {
			return false // done already
		}
	}
	if t := r.Tests; t != nil {
		r.Tests = &jobs.TestReport{Total: t.Total, Passed: t.Passed, Failed: t.Failed, NotRun: t.NotRun}
	}
	if c := r.Compile; c != nil {
		r.Compile = &jobs.CompileReport{Exit: c.Exit, DurationMS: c.DurationMS, OutputTruncated: true}
	}
	r.Stdout, r.Stderr, r.StdoutTruncated, r.StderrTruncated = "", "", true, true
	r.Error = shorten.Cut(r.Error, maxKeptError)
	if ws := r.Workspace; ws != nil {
		step := *ws
		step.SkippedMore += len(step.Skipped)
		step.Skipped, step.Error = nil, shorten.Cut(step.Error, maxKeptError)
		r.Workspace = &step
	}
	note(r, "result", "stdout, stderr, the cases' texts and what else it held dropped to fit the result's limit; the verdict stands")
	return true
}

// shrinkJudged halves what a judged result holds of its compiler's output
// and of each case's stderr and diff, once its stdout and stderr are gone:
// a thousand failing cases can be more than the server takes. It reports
// whether anything was left to cut.
func shrinkJudged(r *jobs.Result) bool {
	cut := false
	half := func(s *string) {
		if len(*s) > 0 {
			*s, cut = shorten.Cut(*s, len(*s)/2), true
		}
	}
	if r.Compile != nil && r.Compile.Output != "" {
		half(&r.Compile.Output)
		r.Compile.OutputTruncated = true
	}
	if r.Tests != nil {
		for i := range r.Tests.Cases {
			c := &r.Tests.Cases[i]
			half(&c.Stderr)
			if c.Diff != nil {
				d := *c.Diff // not the caller's: jobs.Diff may be shared
				half(&d.Expected)
				half(&d.Actual)
				c.Diff = &d
			}
		}
	}
	return cut
}
