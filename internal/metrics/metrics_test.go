package metrics

import (
	"bytes"
	"math"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// parse reads an exposition with Prometheus' own parser, which refuses
// what a Prometheus server would: a family written twice, a sample
// outside its family, bad escapes, a histogram without its +Inf bucket.
func parse(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("Prometheus' parser refuses the exposition: %v\n%s", err, text)
	}
	return fams
}

func scrape(t *testing.T, r *Registry) (string, map[string]*dto.MetricFamily) {
	t.Helper()
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	return rec.Body.String(), parse(t, rec.Body.String())
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// Every kind of metric, with label values and help that need escaping,
// reads back through Prometheus' parser as it was counted.
func TestExpositionParses(t *testing.T) {
	r := NewRegistry()
	jobs := r.CounterVec("jobs_total", "Jobs by status.\nSecond line with a \\ backslash.", "status", "preset")
	jobs.With("succeeded", "python").Inc()
	jobs.With("succeeded", "python").Inc()
	jobs.With("failed", `odd "name" \ with`+"\nnewline").Inc()
	r.Counter("deliveries_total", "Deliveries.").Inc()
	busy := r.GaugeVec("slots_busy", "Slots busy.", "kind")
	busy.With("batch").Inc()
	busy.With("batch").Inc()
	busy.With("batch").Dec()
	r.GaugeFunc("info", "Always 1.", func() float64 { return 1 }, "worker", "w1", "queue", "default")
	r.CounterFunc("hits_total", "Hits.", func() float64 { return 5 })
	d := r.HistogramVec("duration_seconds", "Durations.", []float64{0.1, 1, 10}, "preset")
	for _, v := range []float64{0.05, 0.1, 0.5, 20} {
		d.With("python").Observe(v)
	}
	r.Histogram("wait_seconds", "Waits.", []float64{1}) // no observation yet
	// The same family from a second collector: merged.
	r.Collect(func() []Family {
		return []Family{{Name: "slots_busy", Type: GaugeType, Samples: []Sample{{Labels: []string{"kind", "waiting"}, Value: 3}}}}
	})
	r.GaugeVec("unused", "A vec never used: no family.", "x")

	text, fams := scrape(t, r)
	if _, ok := fams["unused"]; ok {
		t.Errorf("an unused vec was written:\n%s", text)
	}
	byStatus := map[string]float64{}
	for _, m := range fams["jobs_total"].GetMetric() {
		byStatus[labels(m)["status"]+"/"+labels(m)["preset"]] = m.GetCounter().GetValue()
	}
	if byStatus["succeeded/python"] != 2 || byStatus["failed/"+`odd "name" \ with`+"\nnewline"] != 1 {
		t.Errorf("jobs_total %v", byStatus)
	}
	if got := fams["jobs_total"].GetHelp(); got != "Jobs by status.\nSecond line with a \\ backslash." {
		t.Errorf("help %q", got)
	}
	if !strings.Contains(text, `jobs_total{preset="python",status="succeeded"} 2`) {
		t.Errorf("label pairs not sorted by name as Prometheus' client writes them:\n%s", text)
	}
	if got := fams["deliveries_total"].GetMetric()[0].GetCounter().GetValue(); got != 1 {
		t.Errorf("deliveries_total %v", got)
	}
	slots := map[string]float64{}
	for _, m := range fams["slots_busy"].GetMetric() {
		slots[labels(m)["kind"]] = m.GetGauge().GetValue()
	}
	if slots["batch"] != 1 || slots["waiting"] != 3 {
		t.Errorf("slots_busy %v", slots)
	}
	if l := labels(fams["info"].GetMetric()[0]); l["worker"] != "w1" || l["queue"] != "default" {
		t.Errorf("info labels %v", l)
	}
	if fams["hits_total"].GetType() != dto.MetricType_COUNTER || fams["hits_total"].GetMetric()[0].GetCounter().GetValue() != 5 {
		t.Errorf("hits_total %v", fams["hits_total"])
	}
	h := fams["duration_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 4 || math.Abs(h.GetSampleSum()-20.65) > 1e-9 {
		t.Errorf("duration count %d sum %v, want 4 and 20.65", h.GetSampleCount(), h.GetSampleSum())
	}
	want := map[float64]uint64{0.1: 2, 1: 3, 10: 3} // cumulative; 0.1 falls in le="0.1"
	for _, b := range h.GetBucket() {
		if w, ok := want[b.GetUpperBound()]; ok && b.GetCumulativeCount() != w {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), w)
		}
	}
	if w := fams["wait_seconds"].GetMetric()[0].GetHistogram(); w.GetSampleCount() != 0 {
		t.Errorf("wait_seconds count %d", w.GetSampleCount())
	}
	if !strings.Contains(text, `duration_seconds_bucket{preset="python",le="+Inf"} 4`) {
		t.Errorf("no +Inf bucket:\n%s", text)
	}
}

// The Go runtime's and the process's figures are there, named as
// Prometheus' collectors name them, and plausible.
func TestRuntime(t *testing.T) {
	r := NewRegistry()
	r.Runtime()
	text, fams := scrape(t, r)
	value := func(name string) float64 {
		f, ok := fams[name]
		if !ok {
			t.Fatalf("%s missing:\n%s", name, text)
		}
		m := f.GetMetric()[0]
		if f.GetType() == dto.MetricType_COUNTER {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	if v := value("go_goroutines"); v < 1 {
		t.Errorf("go_goroutines %v", v)
	}
	if v := value("go_memstats_heap_alloc_bytes"); v < 1 {
		t.Errorf("go_memstats_heap_alloc_bytes %v", v)
	}
	if v := value("process_resident_memory_bytes"); v < 1<<20 || v > 1<<40 {
		t.Errorf("process_resident_memory_bytes %v", v)
	}
	if v := value("process_open_fds"); v < 3 {
		t.Errorf("process_open_fds %v", v)
	}
	if v, now := value("process_start_time_seconds"), float64(time.Now().Unix()); v < now-3600 || v > now+5 {
		t.Errorf("process_start_time_seconds %v, now %v", v, now)
	}
	value("process_cpu_seconds_total")
	value("go_threads")
	if l := labels(fams["go_info"].GetMetric()[0]); !strings.HasPrefix(l["version"], "go") {
		t.Errorf("go_info %v", l)
	}
}

// Counting and scraping at once: run with -race.
func TestConcurrentUse(t *testing.T) {
	r := NewRegistry()
	c := r.CounterVec("c_total", "C.", "k")
	h := r.HistogramVec("h", "H.", []float64{1}, "k")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 1000 {
				k := string(rune('a' + (i+j)%4))
				c.With(k).Inc()
				h.With(k).Observe(float64(j % 3))
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			var b bytes.Buffer
			if _, err := r.WriteTo(&b); err != nil {
				t.Error(err)
			}
			parse(t, b.String())
		}
	})
	wg.Wait()
	_, fams := scrape(t, r)
	var total float64
	for _, m := range fams["c_total"].GetMetric() {
		total += m.GetCounter().GetValue()
	}
	var count uint64
	for _, m := range fams["h"].GetMetric() {
		count += m.GetHistogram().GetSampleCount()
	}
	if total != 8000 || count != 8000 {
		t.Errorf("counted %v and observed %d, want 8000 each", total, count)
	}
}

// Describe lists every family registered, those without samples yet
// included, with its label names, each once: a reference of the metrics
// generated from it leaves none out. Every family a scrape writes is in it.
func TestDescribe(t *testing.T) {
	r := NewRegistry()
	r.Runtime()
	r.CounterVec("jobs_total", "Jobs by status.", "status", "preset").With("ok", "python").Inc()
	r.GaugeVec("slots_busy", "Slots busy.", "kind")
	r.GaugeFunc("info", "Always 1.", func() float64 { return 1 }, "worker", "w1", "queue", "default")
	r.CounterFunc("hits_total", "Hits.", func() float64 { return 5 })
	r.Histogram("wait_seconds", "Waits.", []float64{1})
	lanes := Desc{Name: "lane_pending", Help: "Pending.", Type: GaugeType, Labels: []string{"queue"}}
	r.Collect(func() []Family { return []Family{lanes.Family(Sample{Labels: []string{"queue", "a"}, Value: 1})} }, lanes)
	r.Collect(func() []Family { return nil }, Desc{Name: "slots_busy", Help: "Second help.", Type: GaugeType, Labels: []string{"kind"}})

	byName := map[string]Desc{}
	var names []string
	for _, d := range r.Describe() {
		if _, dup := byName[d.Name]; dup {
			t.Errorf("%s described twice", d.Name)
		}
		byName[d.Name] = d
		names = append(names, d.Name)
	}
	if !slices.IsSorted(names) {
		t.Errorf("not sorted by name: %v", names)
	}
	for name, want := range map[string]string{
		"jobs_total": "status,preset", "slots_busy": "kind", "info": "worker,queue",
		"hits_total": "", "wait_seconds": "", "lane_pending": "queue", "go_goroutines": "", "go_info": "version",
	} {
		d, ok := byName[name]
		if !ok {
			t.Errorf("%s not described", name)
			continue
		}
		if got := strings.Join(d.Labels, ","); got != want {
			t.Errorf("%s: labels %q, want %q", name, got, want)
		}
	}
	if d := byName["slots_busy"]; d.Help != "Slots busy." || d.Type != GaugeType {
		t.Errorf("slots_busy: %+v, want the first registration's help", d)
	}
	if d := byName["wait_seconds"]; d.Type != HistogramType {
		t.Errorf("wait_seconds: type %s", d.Type)
	}
	_, fams := scrape(t, r)
	for name := range fams {
		if _, ok := byName[name]; !ok {
			t.Errorf("%s is written but not described", name)
		}
	}
}
