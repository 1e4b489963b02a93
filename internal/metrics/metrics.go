// Package metrics serves Prometheus metrics in the text exposition format
// (version 0.0.4): counters, gauges and histograms, with or without
// labels, values read at scrape time, and the Go runtime's and the
// process's own figures.
//
// It stands in for the Prometheus client library, whose registry, protobuf
// model and collectors took about 1.1 MiB of the idle worker's resident
// memory (the target for an idle worker is 30 MiB) for the few metric kinds sandfleet
// uses. The tests parse what it writes with Prometheus' own parser.
package metrics

import (
	"bufio"
	"cmp"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Type is a family's TYPE line.
type Type string

const (
	CounterType   Type = "counter"
	GaugeType     Type = "gauge"
	HistogramType Type = "histogram"
)

// A Sample is one line of a family: its suffix (a histogram's _bucket,
// _sum or _count; "" otherwise), label pairs (name, value, name, value...)
// and value.
type Sample struct {
	Suffix string
	Labels []string
	Value  float64
}

// A Family is a metric name, its help, its type and its samples.
type Family struct {
	Name, Help string
	Type       Type
	Samples    []Sample
}

// A Desc describes a family without its samples: what a reference of the
// metrics lists. Labels are the label names; a histogram's le is implied.
type Desc struct {
	Name, Help string
	Type       Type
	Labels     []string
}

// Family returns the family d describes, with these samples.
func (d Desc) Family(samples ...Sample) Family {
	return Family{Name: d.Name, Help: d.Help, Type: d.Type, Samples: samples}
}

// Registry holds the families one /metrics serves.
type Registry struct {
	mu         sync.Mutex
	collectors []func() []Family
	descs      []Desc
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{} }

// Collect registers f, called at each scrape for families whose samples
// are read then; one call may yield several families, so that what they
// share is read once. descs are the families f may yield, for Describe.
func (r *Registry) Collect(f func() []Family, descs ...Desc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.collectors = append(r.collectors, f)
	r.descs = append(r.descs, descs...)
}

// Describe returns the families registered, whether or not they have
// samples yet, sorted by name, each once (under the first one's help):
// the list a reference of the metrics is generated from.
func (r *Registry) Describe() []Desc {
	r.mu.Lock()
	descs := slices.Clone(r.descs)
	r.mu.Unlock()
	slices.SortStableFunc(descs, func(a, b Desc) int { return cmp.Compare(a.Name, b.Name) })
	return slices.CompactFunc(descs, func(a, b Desc) bool { return a.Name == b.Name })
}

// GaugeFunc registers a gauge read from f at each scrape; labels are
// constant pairs (name, value, ...).
func (r *Registry) GaugeFunc(name, help string, f func() float64, labels ...string) {
	d := Desc{Name: name, Help: help, Type: GaugeType, Labels: pairNames(labels)}
	r.Collect(func() []Family {
		return []Family{d.Family(Sample{Labels: labels, Value: f()})}
	}, d)
}

// pairNames returns the names of label pairs (name, value, ...).
func pairNames(pairs []string) []string {
	var names []string
	for i := 0; i < len(pairs); i += 2 {
		names = append(names, pairs[i])
	}
	return names
}

// CounterFunc registers a counter read from f at each scrape.
func (r *Registry) CounterFunc(name, help string, f func() float64) {
	d := Desc{Name: name, Help: help, Type: CounterType}
	r.Collect(func() []Family {
		return []Family{d.Family(Sample{Value: f()})}
	}, d)
}

// Counter registers a counter without labels.
func (r *Registry) Counter(name, help string) *Counter {
	return r.CounterVec(name, help).With()
}

// CounterVec registers a counter with these label names.
func (r *Registry) CounterVec(name, help string, labels ...string) *CounterVec {
	v := &CounterVec{vec: newVec(labels, func() *Counter { return &Counter{} })}
	r.Collect(func() []Family {
		f := Family{Name: name, Help: help, Type: CounterType}
		v.vec.each(func(pairs []string, c *Counter) {
			f.Samples = append(f.Samples, Sample{Labels: pairs, Value: float64(c.n.Load())})
		})
		return []Family{f}
	}, Desc{Name: name, Help: help, Type: CounterType, Labels: labels})
	return v
}

// Gauge registers a gauge without labels.
func (r *Registry) Gauge(name, help string) *Gauge { return r.GaugeVec(name, help).With() }

// GaugeVec registers a gauge with these label names.
func (r *Registry) GaugeVec(name, help string, labels ...string) *GaugeVec {
	v := &GaugeVec{vec: newVec(labels, func() *Gauge { return &Gauge{} })}
	r.Collect(func() []Family {
		f := Family{Name: name, Help: help, Type: GaugeType}
		v.vec.each(func(pairs []string, g *Gauge) {
			f.Samples = append(f.Samples, Sample{Labels: pairs, Value: float64(g.n.Load())})
		})
		return []Family{f}
	}, Desc{Name: name, Help: help, Type: GaugeType, Labels: labels})
	return v
}

// Histogram registers a histogram without labels; buckets are the upper
// bounds, ascending (+Inf is implied).
func (r *Registry) Histogram(name, help string, buckets []float64) *Histogram {
	return r.HistogramVec(name, help, buckets).With()
}

// HistogramVec registers a histogram with these label names.
func (r *Registry) HistogramVec(name, help string, buckets []float64, labels ...string) *HistogramVec {
	v := &HistogramVec{vec: newVec(labels, func() *Histogram {
		return &Histogram{bounds: buckets, counts: make([]uint64, len(buckets)+1)}
	})}
	r.Collect(func() []Family {
		f := Family{Name: name, Help: help, Type: HistogramType}
		v.vec.each(func(pairs []string, h *Histogram) { f.Samples = h.samples(f.Samples, pairs) })
		return []Family{f}
	}, Desc{Name: name, Help: help, Type: HistogramType, Labels: labels})
	return v
}

// WriteTo writes every family, sorted by name, each once: the samples of
// families of the same name are merged under the first one's help.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	r.mu.Lock()
	collectors := slices.Clone(r.collectors)
	r.mu.Unlock()
	var fams []Family
	for _, c := range collectors {
		fams = append(fams, c()...)
	}
	slices.SortStableFunc(fams, func(a, b Family) int { return cmp.Compare(a.Name, b.Name) })
	cw := &countWriter{w: w}
	bw := bufio.NewWriter(cw)
	for i := 0; i < len(fams); {
		f := fams[i]
		for i++; i < len(fams) && fams[i].Name == f.Name; i++ {
			f.Samples = append(f.Samples, fams[i].Samples...)
		}
		if len(f.Samples) == 0 {
			continue
		}
		writeFamily(bw, f)
	}
	err := bw.Flush()
	return cw.n, err
}

// Handler serves the registry as /metrics.
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = r.WriteTo(w)
	})
}

func writeFamily(w *bufio.Writer, f Family) {
	w.WriteString("# HELP " + f.Name + " " + helpEscaper.Replace(f.Help) + "\n")
	w.WriteString("# TYPE " + f.Name + " " + string(f.Type) + "\n")
	for _, s := range f.Samples {
		w.WriteString(f.Name + s.Suffix)
		if len(s.Labels) > 0 {
			w.WriteByte('{')
			for i := 0; i+1 < len(s.Labels); i += 2 {
				if i > 0 {
					w.WriteByte(',')
				}
				w.WriteString(s.Labels[i] + `="` + labelEscaper.Replace(s.Labels[i+1]) + `"`)
			}
			w.WriteByte('}')
		}
		w.WriteByte(' ')
		w.WriteString(formatFloat(s.Value))
		w.WriteByte('\n')
	}
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Counter only goes up.
type Counter struct{ n atomic.Uint64 }

// Inc adds 1.
func (c *Counter) Inc() { c.n.Add(1) }

// Add adds n.
func (c *Counter) Add(n uint64) { c.n.Add(n) }

// Gauge goes up and down.
type Gauge struct{ n atomic.Int64 }

// Inc adds 1.
func (g *Gauge) Inc() { g.n.Add(1) }

// Dec subtracts 1.
func (g *Gauge) Dec() { g.n.Add(-1) }

// Histogram counts observations into buckets.
type Histogram struct {
	bounds []float64
	mu     sync.Mutex // the sum and the counts change together
	counts []uint64   // per bucket, not cumulative; the last is +Inf's
	sum    float64
}

// Observe counts v in the first bucket whose bound it does not exceed.
func (h *Histogram) Observe(v float64) {
	i, _ := slices.BinarySearch(h.bounds, v)
	h.mu.Lock()
	h.counts[i]++
	h.sum += v
	h.mu.Unlock()
}

// samples appends the histogram's cumulative buckets, sum and count.
func (h *Histogram) samples(out []Sample, pairs []string) []Sample {
	h.mu.Lock()
	counts, sum := slices.Clone(h.counts), h.sum
	h.mu.Unlock()
	var total uint64
	for i, n := range counts {
		total += n
		le := math.Inf(1)
		if i < len(h.bounds) {
			le = h.bounds[i]
		}
		out = append(out, Sample{Suffix: "_bucket", Labels: append(slices.Clip(pairs), "le", formatFloat(le)), Value: float64(total)})
	}
	return append(out,
		Sample{Suffix: "_sum", Labels: pairs, Value: sum},
		Sample{Suffix: "_count", Labels: pairs, Value: float64(total)})
}

// vec holds one metric per combination of label values, created on first
// use; the label pairs of each are sorted by name, as Prometheus' client
// writes them.
type vec[M any] struct {
	names []string
	make  func() *M
	mu    sync.RWMutex
	byKey map[string]*entry[M]
}

type entry[M any] struct {
	pairs []string
	m     *M
}

func newVec[M any](names []string, make func() *M) vec[M] {
	return vec[M]{names: names, make: make, byKey: map[string]*entry[M]{}}
}

// with returns the metric of these label values (as many as names).
func (v *vec[M]) with(values []string) *M {
	if len(values) != len(v.names) {
		panic("metrics: " + strconv.Itoa(len(values)) + " label values for " + strconv.Itoa(len(v.names)) + " labels")
	}
	key := strings.Join(values, "\xff")
	v.mu.RLock()
	e := v.byKey[key]
	v.mu.RUnlock()
	if e != nil {
		return e.m
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if e = v.byKey[key]; e == nil {
		e = &entry[M]{m: v.make()}
		idx := make([]int, len(v.names))
		for i := range idx {
			idx[i] = i
		}
		slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(v.names[a], v.names[b]) })
		for _, i := range idx {
			e.pairs = append(e.pairs, v.names[i], values[i])
		}
		v.byKey[key] = e
	}
	return e.m
}

// each calls f for every metric, in the order of their label values.
func (v *vec[M]) each(f func(pairs []string, m *M)) {
	v.mu.RLock()
	entries := make([]*entry[M], 0, len(v.byKey))
	for _, e := range v.byKey {
		entries = append(entries, e)
	}
	v.mu.RUnlock()
	slices.SortFunc(entries, func(a, b *entry[M]) int { return slices.Compare(a.pairs, b.pairs) })
	for _, e := range entries {
		f(e.pairs, e.m)
	}
}

// CounterVec is a counter per combination of label values.
type CounterVec struct{ vec vec[Counter] }

// With returns the counter of these label values, in the order of the
// label names given at registration.
func (v *CounterVec) With(values ...string) *Counter { return v.vec.with(values) }

// GaugeVec is a gauge per combination of label values.
type GaugeVec struct{ vec vec[Gauge] }

// With returns the gauge of these label values.
func (v *GaugeVec) With(values ...string) *Gauge { return v.vec.with(values) }

// HistogramVec is a histogram per combination of label values.
type HistogramVec struct{ vec vec[Histogram] }

// With returns the histogram of these label values.
func (v *HistogramVec) With(values ...string) *Histogram { return v.vec.with(values) }

// WriteList writes descs one a line, fields separated by tabs: name,
// type, label names (comma-separated, "-" when none) and help. It is what
// "worker metrics" and "gateway metrics" print, and what the reference
// page docs/metrics.md is generated from.
func WriteList(w io.Writer, descs []Desc) error {
	bw := bufio.NewWriter(w)
	for _, d := range descs {
		labels := strings.Join(d.Labels, ",")
		if labels == "" {
			labels = "-"
		}
		bw.WriteString(d.Name + "\t" + string(d.Type) + "\t" + labels + "\t" + helpEscaper.Replace(d.Help) + "\n")
	}
	return bw.Flush()
}
