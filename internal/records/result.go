package records

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/shorten"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// StoreResult creates RESULTS[r.ID] unless it exists: the first writer wins.
// It returns the stored result (r, or the winner's) and whether r won.
//
// The result is shortened in place to fit maxBytes first (see EncodeResult).
func StoreResult(ctx context.Context, kv jetstream.KeyValue, r *jobs.Result, maxBytes int) (stored *jobs.Result, won bool, err error) {
	data, err := EncodeResult(r, maxBytes)
	if err != nil {
		return nil, false, err
	}
	winner, won, err := fleet.CreateFirst(ctx, kv, r.ID, data)
	if err != nil {
		return nil, false, err
	}
	if won {
		return r, true, nil
	}
	w, err := jobs.DecodeStoredResult(r.ID, winner)
	if err != nil {
		return nil, false, err
	}
	return w, false, nil
}

// EncodeResult encodes r, dropping its display outputs (and counting them
// dropped), then shortening its stdout and stderr (and marking them
// truncated) until the encoding fits maxBytes (0: no limit). The output
// caps count raw bytes, but JSON may take up to six bytes for one ('<',
// control bytes, invalid UTF-8): without this, a job's own output could make
// its result impossible to store, and the job would be run again and again.
func EncodeResult(r *jobs.Result, maxBytes int) ([]byte, error) {
	for {
		data, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("encode result %s: %w", r.ID, err)
		}
		excess := len(data) - maxBytes
		if maxBytes <= 0 || excess <= 0 {
			return data, nil
		}
		// Display outputs go first, the last first: they are only for
		// showing, and one may be most of a result.
		if n := len(r.Display); n > 0 {
			r.Display, r.DisplayDropped = r.Display[:n-1], r.DisplayDropped+1
			if n == 1 {
				r.Display = nil
			}
			continue
		}
		// Shrink both streams by the share the encoding is over, so that
		// each keeps its fair part; a few rounds converge.
		f := float64(maxBytes) / float64(len(data)) * 0.98
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
		if !cut && !shrinkJudged(r) {
			return nil, fmt.Errorf("encode result %s: %d bytes without any output, over the %d the server takes", r.ID, len(data), maxBytes)
		}
	}
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
