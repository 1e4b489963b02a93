package console

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sandfleet/sandfleet/internal/jobindex"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// batch: GET /batches/{name}[?group=LABEL] — a batch's progress and
// summary, read from its records in the index (the subject filters them:
// the server sends the batch's records only).
type batchPage struct {
	Name      string
	Jobs      int
	Running   int
	Finished  int
	Passed    int
	Counts    []statusCount
	Group     string
	GroupKeys []string
	Groups    []groupRow
	P50       string
	P95       string
	Max       string
	First     *time.Time
	Last      *time.Time
	Rate      string
	Durations *plot
	Rates     *plot
	Cut       bool
}

type statusCount struct {
	Status string
	N      int
}

type groupRow struct {
	Value          string
	Jobs, Finished int
	Passed         int
}

func (p batchPage) frame() frame {
	refresh := 0
	if p.Running > 0 {
		refresh = 5
	}
	return frame{"Batch " + p.Name, "batches", refresh}
}

func (c *Console) batch(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx, cancel := pageCtx(r)
	defer cancel()
	name := r.PathValue("name")
	if !jobs.ValidQueue(name) {
		return notFound("no batch %q (batch names match [A-Za-z0-9_-]{1,64})", name)
	}
	idx, err := c.index(ctx, s)
	switch {
	case errors.Is(err, jobindex.ErrNoIndex):
		return notFound("this fleet keeps no job index: its workers predate it")
	case errors.Is(err, jobs.ErrNotTenants):
		return notFound("a tenant's credentials read no job index (it holds every tenant's jobs): no batch report here")
	}
	if err != nil {
		return err
	}
	group := r.URL.Query().Get("group")
	p := batchPage{Name: name, Group: group}
	counts := map[jobs.Status]int{}
	groups := map[string]*groupRow{}
	keys := map[string]bool{}
	var durations []int64
	var ends []time.Time
	_, cut, err := idx.Scan(ctx, name, c.cfg.MaxBatchJobs, func(j *records.Summary) bool {
		if !s.viewer.Scope.Shows(j.ID) {
			return true // a tenant's, among the operator's
		}
		p.Jobs++
		for k := range j.Labels {
			if k != jobs.BatchLabel && len(keys) < 50 {
				keys[k] = true
			}
		}
		var g *groupRow
		if group != "" {
			v := j.Labels[group]
			if g = groups[v]; g == nil {
				if len(groups) < 1000 {
					g = &groupRow{Value: v}
					groups[v] = g
				} else {
					g = &groupRow{} // past the bound: counted nowhere
				}
			}
			g.Jobs++
		}
		if j.State == records.Running {
			p.Running++
			return true
		}
		p.Finished++
		counts[j.Status]++
		if j.Status == jobs.StatusSucceeded {
			p.Passed++
		}
		if g != nil {
			g.Finished++
			if j.Status == jobs.StatusSucceeded {
				g.Passed++
			}
		}
		if j.DurationMS != nil {
			durations = append(durations, *j.DurationMS)
		}
		if j.FinishedAt != nil {
			ends = append(ends, *j.FinishedAt)
		}
		return true
	})
	if err != nil {
		return err
	}
	if p.Jobs == 0 {
		return notFound("no job of batch %q in the index (none taken yet, or its records expired)", name)
	}
	p.Cut = cut
	for _, st := range jobs.Statuses {
		if counts[st] > 0 {
			p.Counts = append(p.Counts, statusCount{string(st), counts[st]})
		}
	}
	p.GroupKeys = slices.Sorted(maps.Keys(keys))
	for _, g := range groups {
		p.Groups = append(p.Groups, *g)
	}
	slices.SortFunc(p.Groups, func(a, b groupRow) int { return strings.Compare(a.Value, b.Value) })
	if len(durations) > 0 {
		slices.Sort(durations)
		q := func(f float64) string {
			return ms(&durations[min(len(durations)-1, int(f*float64(len(durations))))])
		}
		p.P50, p.P95, p.Max = q(0.5), q(0.95), ms(&durations[len(durations)-1])
		p.Durations = histogram(durations)
	}
	if len(ends) > 0 {
		slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
		p.First, p.Last = &ends[0], &ends[len(ends)-1]
		if span := ends[len(ends)-1].Sub(ends[0]); span > 0 {
			p.Rate = fmt.Sprintf("%.2f jobs/s", float64(len(ends)-1)/span.Seconds())
		}
		p.Rates = throughput(ends)
	}
	c.render(w, http.StatusOK, "batch", s, p)
	return nil
}

// plot is a bar chart the server draws as SVG: every coordinate is a
// number computed here, every text goes through the template's escaping.
type plot struct {
	Title  string
	XLabel string
	YLabel string
	Bars   []bar
	XTicks []tick
	YTicks []tick
}

type bar struct {
	X, Y, W, H float64
	Tip        string
}

type tick struct {
	At    float64
	Label string
	End   bool // the last: anchored at its end, inside the frame
}

// The plot's frame, in viewBox units.
const (
	plotW, plotH       = 640.0, 240.0
	plotLeft, plotBot  = 48.0, 36.0
	plotTop, plotRight = 12.0, 12.0
)

func (plot) Width() float64  { return plotW }
func (plot) Height() float64 { return plotH }
func (plot) Left() float64   { return plotLeft }
func (plot) Right() float64  { return plotW - plotRight }
func (plot) Top() float64    { return plotTop }
func (plot) Bottom() float64 { return plotH - plotBot }

// bars lays out counts as bars over the frame, with y ticks.
func bars(values []float64, tip func(i int) string) ([]bar, []tick) {
	most := 0.0
	for _, v := range values {
		most = math.Max(most, v)
	}
	// Four grid steps of a round size: counts get whole ones.
	step := niceCeil(most / 4)
	if integral(values) {
		step = math.Max(step, 1)
	}
	top := 4 * step
	iw := plotW - plotLeft - plotRight
	ih := plotH - plotTop - plotBot
	bw := iw / float64(len(values))
	var out []bar
	for i, v := range values {
		h := 0.0
		if top > 0 {
			h = v / top * ih
		}
		out = append(out, bar{X: plotLeft + float64(i)*bw + 1, Y: plotH - plotBot - h, W: math.Max(bw-2, 1), H: h, Tip: tip(i)})
	}
	var yt []tick
	for k := 0; k <= 4; k++ {
		v := top * float64(k) / 4
		yt = append(yt, tick{At: plotH - plotBot - ih*float64(k)/4, Label: trimFloat(v)})
	}
	return out, yt
}

func integral(vs []float64) bool {
	for _, v := range vs {
		if v != math.Trunc(v) {
			return false
		}
	}
	return true
}

// histogram of durations (ms, sorted), 20 bins from 0 to the largest.
func histogram(d []int64) *plot {
	const n = 20
	hi := float64(d[len(d)-1])
	if hi <= 0 {
		hi = 1
	}
	width := niceCeil(hi) / n
	counts := make([]float64, n)
	for _, v := range d {
		counts[min(n-1, int(float64(v)/width))]++
	}
	label := func(v float64) string { return shortDur(time.Duration(v) * time.Millisecond) }
	p := &plot{Title: "Duration", XLabel: "duration", YLabel: "jobs"}
	p.Bars, p.YTicks = bars(counts, func(i int) string {
		return fmt.Sprintf("%s–%s: %.0f jobs", label(float64(i)*width), label(float64(i+1)*width), counts[i])
	})
	iw := plotW - plotLeft - plotRight
	for k := 0; k <= 4; k++ {
		p.XTicks = append(p.XTicks, tick{At: plotLeft + iw*float64(k)/4, Label: label(width * n * float64(k) / 4), End: k == 4})
	}
	return p
}

// throughput: jobs finished per second, in 30 buckets from the first end
// to the last.
func throughput(ends []time.Time) *plot {
	const n = 30
	t0 := ends[0]
	span := ends[len(ends)-1].Sub(t0)
	if span < time.Second {
		span = time.Second
	}
	bucket := span / n
	rates := make([]float64, n)
	for _, e := range ends {
		rates[min(n-1, int(e.Sub(t0)/bucket))]++
	}
	for i := range rates {
		rates[i] /= bucket.Seconds()
	}
	p := &plot{Title: "Throughput", XLabel: "time since the first result", YLabel: "jobs/s"}
	p.Bars, p.YTicks = bars(rates, func(i int) string {
		return fmt.Sprintf("+%s: %.2f jobs/s", shortDur(time.Duration(i)*bucket), rates[i])
	})
	iw := plotW - plotLeft - plotRight
	for k := 0; k <= 4; k++ {
		p.XTicks = append(p.XTicks, tick{At: plotLeft + iw*float64(k)/4, Label: "+" + shortDur(span*time.Duration(k)/4), End: k == 4})
	}
	return p
}

// niceCeil rounds up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}
