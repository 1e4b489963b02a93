package jobindex

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/internal/shorten"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// ErrNoIndex: the fleet keeps no job index (its workers predate it, or
// none has started yet).
var ErrNoIndex = errors.New("this fleet keeps no job index (no stream INDEX; its workers predate it)")

// Index reads the job index. It reads by batched direct gets
// ($JS.API.DIRECT.GET.INDEX with batch and next_by_subj): the server
// filters by subject and sends a window of records, and no consumer is
// created per page view.
type Index struct {
	js     jetstream.JetStream
	stream jetstream.Stream
}

// Open binds the job index on js, an operator's connection; ErrNoIndex
// when the stream does not exist.
func Open(ctx context.Context, js jetstream.JetStream) (*Index, error) {
	s, err := js.Stream(ctx, fleet.IndexStreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoIndex
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", fleet.IndexStreamName, err)
	}
	return &Index{js: js, stream: s}, nil
}

// Query selects summary records, newest first.
type Query struct {
	Queue string // "" for every queue
	Batch string // "" for every job; records.NoBatch for jobs outside batches
	// Before keeps records below this sequence (an IndexPage's Next);
	// 0 starts at the newest.
	Before uint64
	// Limit is the most records returned. Default 50.
	Limit int
	// MaxScan bounds the sequences one call reads through, whatever
	// Match keeps. Default 20,000.
	MaxScan uint64
	// Match, if set, keeps only the records it returns true for (status,
	// label, ID: what the subject does not filter).
	Match func(*records.Summary) bool
	// Contains, if set, skips without decoding them the records whose
	// JSON lacks any of these byte strings: a cheap first cut for Match
	// (`"status":"failed"`, a label's `"key":"value"`).
	Contains [][]byte
}

// contains reports whether data holds every one of subs.
func contains(data []byte, subs [][]byte) bool {
	for _, s := range subs {
		if !bytes.Contains(data, s) {
			return false
		}
	}
	return true
}

// Page is one call's records.
type Page struct {
	Jobs []*records.Summary
	// Next is the Before of the next, older, page: 0 when there is none.
	Next uint64
	// Scanned is how many sequences were read through; Cut is set when
	// MaxScan ended the page before Limit records were found.
	Scanned uint64
	Cut     bool
	// First and Last are the stream's sequences when the call began.
	First, Last uint64
}

// filter is the subject a query reads.
func (q Query) filter() string {
	queue, batch := q.Queue, q.Batch
	if queue == "" && batch == "" {
		return fleet.IndexSubjectPrefix + "job.>"
	}
	if queue == "" {
		queue = "*"
	}
	if batch == "" {
		batch = "*"
	}
	return fleet.IndexSubjectPrefix + "job." + queue + "." + batch + ".>"
}

// The windows a List reads, from the newest backwards: small first (the
// common page needs one), then larger, so that a rare match costs few
// round trips.
const (
	indexWindowMin = 256
	indexWindowMax = 8192
	// indexMaxBytes bounds one batch's answer.
	indexMaxBytes = 1 << 20
)

// List returns the records q selects, newest first, reading windows of
// sequences backwards from q.Before (or the newest) until q.Limit records
// match or q.MaxScan sequences are read.
func (x *Index) List(ctx context.Context, q Query) (*Page, error) {
	if q.Limit <= 0 {
		q.Limit = 50
	}
	if q.MaxScan == 0 {
		q.MaxScan = 20_000
	}
	if (q.Queue != "" && !jobs.ValidQueue(q.Queue)) || (q.Batch != "" && q.Batch != records.NoBatch && !jobs.ValidQueue(q.Batch)) {
		return nil, invalid("queue %q or batch %q is not a name", shorten.Text(q.Queue, 70), shorten.Text(q.Batch, 70))
	}
	info, err := x.stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", fleet.IndexStreamName, err)
	}
	page := &Page{First: info.State.FirstSeq, Last: info.State.LastSeq}
	if info.State.Msgs == 0 {
		return page, nil
	}
	hi := info.State.LastSeq
	if q.Before > 0 {
		if q.Before <= page.First {
			return page, nil
		}
		hi = min(hi, q.Before-1)
	}
	filter := q.filter()
	window := uint64(indexWindowMin)
	for hi >= page.First {
		if page.Scanned >= q.MaxScan {
			page.Cut, page.Next = true, hi+1
			return page, nil
		}
		span := min(window, q.MaxScan-page.Scanned, hi-page.First+1)
		lo := hi - span + 1
		var got []*records.Summary
		err := x.read(ctx, lo, hi, filter, func(seq uint64, data []byte) bool {
			if !contains(data, q.Contains) {
				return true
			}
			s, err := decodeSummary(data)
			if err == nil {
				s.Seq = seq
				got = append(got, s)
			}
			return true
		})
		if err != nil {
			return nil, err
		}
		page.Scanned += span
		for i := len(got) - 1; i >= 0; i-- {
			s := got[i]
			if q.Match != nil && !q.Match(s) {
				continue
			}
			page.Jobs = append(page.Jobs, s)
			if len(page.Jobs) == q.Limit {
				if s.Seq > page.First {
					page.Next = s.Seq
				}
				return page, nil
			}
		}
		if lo == page.First {
			break
		}
		hi = lo - 1
		window = min(2*window, indexWindowMax)
	}
	return page, nil
}

// Scan calls fn with every record of batch (records.NoBatch: outside any batch),
// oldest first, until fn returns false or max records were read; it
// returns how many it read and whether max cut the scan short.
func (x *Index) Scan(ctx context.Context, batch string, max int, fn func(*records.Summary) bool) (n int, cut bool, err error) {
	if !jobs.ValidQueue(batch) && batch != records.NoBatch {
		return 0, false, invalid("batch %q is not a name", shorten.Text(batch, 70))
	}
	filter := Query{Batch: batch}.filter()
	err = x.read(ctx, 1, 0, filter, func(seq uint64, data []byte) bool {
		if n == max {
			cut = true
			return false
		}
		n++
		s, err := decodeSummary(data)
		if err != nil {
			return true
		}
		s.Seq = seq
		return fn(s)
	})
	return n, cut, err
}

// DeadLetters returns the newest dead letters (at most limit) and how many
// the index holds.
func (x *Index) DeadLetters(ctx context.Context, limit int) ([]*records.Summary, int, error) {
	var ring []*records.Summary
	total := 0
	err := x.read(ctx, 1, 0, fleet.IndexSubjectPrefix+"dead.>", func(seq uint64, data []byte) bool {
		total++
		if s, err := decodeSummary(data); err == nil {
			s.Seq = seq
			ring = append(ring, s)
			if len(ring) > limit {
				ring = ring[1:]
			}
		}
		return total < 100_000
	})
	for i, j := 0, len(ring)-1; i < j; i, j = i+1, j-1 {
		ring[i], ring[j] = ring[j], ring[i]
	}
	return ring, total, err
}

// Summary returns a job's latest summary record, ErrNotFound without one.
func (x *Index) Summary(ctx context.Context, id string) (*records.Summary, error) {
	if !jobs.ValidID(id) {
		return nil, fmt.Errorf("%w: %s", jobs.ErrNotFound, shorten.Text(id, 140))
	}
	m, err := x.stream.GetLastMsgForSubject(ctx, fleet.IndexSubjectPrefix+"job.*.*."+id)
	if err != nil {
		return nil, x.lookupErr(id, err)
	}
	s, err := decodeSummary(m.Data)
	if err != nil {
		return nil, fmt.Errorf("index record of %s: %w", id, err)
	}
	s.Seq = m.Sequence
	return s, nil
}

// Spec returns a job's spec record, ErrNotFound without one.
func (x *Index) Spec(ctx context.Context, id string) (*records.Spec, error) {
	if !jobs.ValidID(id) {
		return nil, fmt.Errorf("%w: %s", jobs.ErrNotFound, shorten.Text(id, 140))
	}
	m, err := x.stream.GetLastMsgForSubject(ctx, fleet.IndexSpecSubject(id))
	if err != nil {
		return nil, x.lookupErr(id, err)
	}
	var s records.Spec
	if err := json.Unmarshal(m.Data, &s); err != nil {
		return nil, fmt.Errorf("spec record of %s: %w", id, err)
	}
	return &s, nil
}

func (x *Index) lookupErr(id string, err error) error {
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("%w: %s", jobs.ErrNotFound, shorten.Text(id, 140))
	}
	return fmt.Errorf("index %s: %w", id, err)
}

// indexReadTimeout bounds the wait for each message of a batch.
const indexReadTimeout = 5 * time.Second

// read calls fn with each record from sequence from on (to hi; 0: to the
// end) whose subject matches filter, in order, until fn returns false: one
// batched direct get after another.
func (x *Index) read(ctx context.Context, from, hi uint64, filter string, fn func(seq uint64, data []byte) bool) error {
	nc := x.js.Conn()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	api := "$JS.API.DIRECT.GET." + fleet.IndexStreamName
	if p := x.js.Options().APIPrefix; p != "" {
		api = strings.TrimSuffix(p, ".") + ".DIRECT.GET." + fleet.IndexStreamName
	}
	for {
		batch := indexWindowMax
		if hi > 0 {
			if from > hi {
				return nil
			}
			batch = int(min(hi-from+1, indexWindowMax))
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		req, _ := json.Marshal(map[string]any{"seq": from, "next_by_subj": filter, "batch": batch, "max_bytes": indexMaxBytes})
		if err := nc.PublishRequest(api, inbox, req); err != nil {
			return err
		}
		got, last, err := x.readBatch(ctx, sub, hi, fn)
		if err != nil || !got {
			return err
		}
		if last == 0 {
			return nil // fn stopped, or the window passed hi
		}
		from = last + 1
	}
}

// readBatch reads one batch's answer. It returns whether to go on, and
// the last sequence the batch carried (0 when fn stopped or hi passed).
func (x *Index) readBatch(ctx context.Context, sub *nats.Subscription, hi uint64, fn func(seq uint64, data []byte) bool) (bool, uint64, error) {
	var last uint64
	stopped := false
	for {
		// NextMsg rather than a context per message: a batch is
		// thousands of messages, and ctx is checked between batches.
		m, err := sub.NextMsg(indexReadTimeout)
		if err != nil {
			return false, 0, fmt.Errorf("read %s: %w", fleet.IndexStreamName, err)
		}
		switch m.Header.Get("Status") {
		case "":
		case "404": // nothing (more) matches
			return false, 0, nil
		case "204": // end of this batch
			if stopped {
				return false, 0, nil
			}
			if np, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64); np == 0 || last == 0 {
				return false, 0, nil
			}
			return true, last, nil
		default:
			return false, 0, fmt.Errorf("read %s: status %s %s", fleet.IndexStreamName, m.Header.Get("Status"), m.Header.Get("Description"))
		}
		if stopped {
			continue // drain the batch to its end
		}
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			continue
		}
		if hi > 0 && seq > hi {
			stopped = true
			continue
		}
		last = seq
		if !fn(seq, m.Data) {
			stopped = true
		}
	}
}

// invalid is a query's error: jobs.ErrInvalidJob, as the client's for a
// bad name.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", jobs.ErrInvalidJob, fmt.Sprintf(format, args...))
}
