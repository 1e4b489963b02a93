package batch

import (
	"bytes"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// Progress is a snapshot of a running batch.
type Progress struct {
	Total    int                 // valid jobs in the input
	Done     int                 // results received
	Reused   int                 // of Done, stored before this run
	InFlight int                 // looked up or published, no result yet
	Bad      int                 // bad lines
	Statuses map[jobs.Status]int // results by status
	Elapsed  time.Duration       // since Run started publishing
	// Rate is the results per second produced by the fleet during this
	// run (reused results excluded); 0 until the first arrives.
	Rate float64
	// ETA is the time left at Rate; -1 while unknown.
	ETA time.Duration
}

// Summary is the end of a batch. Its JSON form is `submit batch --json`.
type Summary struct {
	Name    string `json:"batch"`
	Total   int    `json:"total"`
	Done    int    `json:"done"`
	Reused  int    `json:"reused"`
	Pending int    `json:"pending"` // not finished when Run returned
	// InFlight are the pending jobs that were published (or found queued):
	// they go on in the fleet after an interruption.
	InFlight    int                 `json:"in_flight"`
	Bad         int                 `json:"bad_lines"`
	Statuses    map[jobs.Status]int `json:"statuses"`
	Duration    Percentiles         `json:"duration_ms"`
	WallMS      int64               `json:"wall_ms"`
	Throughput  float64             `json:"throughput_per_s"` // results of this run per second of wall time
	Interrupted bool                `json:"interrupted"`
	// Passed counts the succeeded results; Groups the pass counts and
	// pass@1 per label value (every label but batch_line and task_id,
	// and of a key with at most 100 values).
	Passed int     `json:"passed"`
	Groups []Group `json:"groups"`
	// Retried counts the jobs run again under a new ID by RetryErrors.
	Retried int `json:"retried,omitempty"`
}

// Percentiles of the jobs' durations (Result.DurationMS), null when no
// result had one.
type Percentiles struct {
	P50 *int64 `json:"p50"`
	P95 *int64 `json:"p95"`
	Max *int64 `json:"max"`
}

// AllSucceeded reports whether every line was a valid job that succeeded.
func (s *Summary) AllSucceeded() bool {
	return s.Bad == 0 && s.Pending == 0 && s.Done == s.Total && s.Statuses[jobs.StatusSucceeded] == s.Total
}

// stats are the counts of a batch. The tracker's lock guards them.
type stats struct {
	total     int // valid jobs, less those the server refused
	done      int // results received
	reused    int // of done, stored before this run
	bad       int // bad lines, and jobs the server refused
	statuses  map[jobs.Status]int
	durations []int64   // the results' DurationMS, where set
	started   time.Time // when publishing started; zero before
	passed    int       // results that succeeded
	retried   int       // results of jobs run again by RetryErrors
	groups    groups    // pass counts per label value
	manifest  record    // presets, image IDs and limits, for the run manifest
}

// record counts a job's result.
func (s *stats) record(res *jobs.Result, reused bool) {
	s.done++
	if reused {
		s.reused++
	}
	s.statuses[res.Status]++
	if res.Status == jobs.StatusSucceeded {
		s.passed++
	}
	s.groups.add(res, res.ID)
	if res.RetryOf != "" && !reused {
		s.retried++
	}
	if res.DurationMS != nil {
		s.durations = append(s.durations, *res.DurationMS)
	}
}

// progress is the snapshot of a batch with inflight jobs in flight.
func (s *stats) progress(inflight int) Progress {
	p := Progress{
		Total:    s.total,
		Done:     s.done,
		Reused:   s.reused,
		InFlight: inflight,
		Bad:      s.bad,
		Statuses: maps.Clone(s.statuses),
		ETA:      -1,
	}
	if !s.started.IsZero() {
		p.Elapsed = time.Since(s.started)
	}
	if ran := s.done - s.reused; ran > 0 && p.Elapsed > 0 {
		p.Rate = float64(ran) / p.Elapsed.Seconds()
		p.ETA = time.Duration(float64(s.total-s.done) / p.Rate * float64(time.Second))
	}
	return p
}

// summary is the end of a batch of wall time wall, with published jobs
// still in the fleet.
func (s *stats) summary(name string, wall time.Duration, published int, interrupted bool) *Summary {
	sum := &Summary{
		Name:        name,
		Total:       s.total,
		Done:        s.done,
		Reused:      s.reused,
		Pending:     s.total - s.done,
		InFlight:    published,
		Bad:         s.bad,
		Statuses:    maps.Clone(s.statuses),
		WallMS:      wall.Milliseconds(),
		Interrupted: interrupted,
		Passed:      s.passed,
		Groups:      s.groups.summary(),
		Retried:     s.retried,
	}
	if wall > 0 {
		sum.Throughput = math.Round(float64(s.done-s.reused)/wall.Seconds()*100) / 100
	}
	if len(s.durations) > 0 {
		d := slices.Clone(s.durations)
		slices.Sort(d)
		pick := func(q float64) *int64 {
			// nearest rank
			i := int(math.Ceil(q*float64(len(d)))) - 1
			v := d[max(0, min(i, len(d)-1))]
			return &v
		}
		sum.Duration = Percentiles{P50: pick(0.50), P95: pick(0.95), Max: pick(1)}
	}
	return sum
}

// FormatStatuses formats a status count map in the order of jobs.Statuses.
func FormatStatuses(m map[jobs.Status]int) string {
	var b bytes.Buffer
	for _, st := range jobs.Statuses {
		if m[st] == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(string(st) + " " + strconv.Itoa(m[st]))
	}
	if b.Len() == 0 {
		return "none yet"
	}
	return b.String()
}
