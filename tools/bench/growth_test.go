package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestLevels(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []int
		err  bool
	}{
		{"1,4,16,64", []int{1, 4, 16, 64}, false},
		{" 0, 10 ,50,", []int{0, 10, 50}, false},
		{"", nil, true},
		{"1,x", nil, true},
		{"-1", nil, true},
	} {
		got, err := levels(tc.in)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("levels(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// Percentiles are nearest-rank over the sorted values, and leave the
// caller's slice as it was.
func TestPct(t *testing.T) {
	t.Parallel()
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	orig := slices.Clone(d)
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{0, time.Millisecond}, {.5, 51 * time.Millisecond}, {.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}} {
		if got := pct(d, tc.p); got != tc.want {
			t.Errorf("pct(1..100 ms, %v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if !slices.Equal(d, orig) {
		t.Error("pct reordered its input")
	}
	if got := pct(nil, .5); got != 0 {
		t.Errorf("pct(none) = %v, want 0", got)
	}
}

// fanOut makes exactly the calls asked for, never more at once than its
// callers (and all of them at once when the calls wait for each other),
// and counts failures apart from the timed calls.
func TestFanOut(t *testing.T) {
	t.Parallel()
	const callers, total = 4, 23
	var inFlight, peak, calls atomic.Int32
	all := make(chan struct{})
	var once sync.Once
	l := fanOut(context.Background(), callers, total, callers, os.Getpid(), func(ctx context.Context, c int) error {
		if c < 0 || c >= callers {
			t.Errorf("caller %d out of range", c)
		}
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if n == callers {
			once.Do(func() { close(all) })
		}
		k := calls.Add(1)
		if k <= callers { // the first round waits for every caller
			<-all
		}
		if k%5 == 0 {
			return errors.New("fifth")
		}
		return nil
	})
	if calls.Load() != total || len(l.ok)+l.fails != total {
		t.Errorf("%d calls, %d timed + %d failed; want %d", calls.Load(), len(l.ok), l.fails, total)
	}
	if peak.Load() != callers {
		t.Errorf("at most %d calls at once, want %d", peak.Load(), callers)
	}
	if l.fails != total/5 || l.firstErr != "fifth" {
		t.Errorf("failures %d, first %q", l.fails, l.firstErr)
	}
	if l.level != callers || l.wall <= 0 {
		t.Errorf("level %d wall %v", l.level, l.wall)
	}
}

func TestNiceCeil(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want float64 }{
		{0, 1}, {-3, 1}, {1, 1}, {1.1, 2}, {3, 5}, {22, 25}, {37, 50}, {880, 1000}, {1000, 1000}, {0.03, 0.05},
	} {
		if got := niceCeil(tc.in); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("niceCeil(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// The plot is well-formed SVG a browser shows: every text escaped, a
// polyline per line with a point per value it has (a missing value, NaN,
// leaves a gap), every point inside its panel, the y axis topped by a
// round number at or above the largest value.
func TestWritePlot(t *testing.T) {
	t.Parallel()
	panels := []plotPanel{
		{title: "latency <p50 & p99>", xlabel: "callers", unit: "ms", xs: []string{"1", "4", "16", "64"},
			lines: []plotLine{{"p50", []float64{10, 20, 40, 80}}, {"p99", []float64{30, math.NaN(), 90, 180}}}},
		{title: "one level", xlabel: "n", unit: "MiB", xs: []string{"0"}, lines: []plotLine{{"RSS", []float64{0}}}},
	}
	var b bytes.Buffer
	if err := writePlot(&b, `a "title" & more`, panels); err != nil {
		t.Fatal(err)
	}
	var polylines [][]string
	var texts []string
	dec := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	var inText bool
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, b.String())
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			inText = tok.Name.Local == "text"
			for _, a := range tok.Attr {
				if tok.Name.Local == "polyline" && a.Name.Local == "points" {
					polylines = append(polylines, strings.Fields(a.Value))
				}
			}
		case xml.CharData:
			if inText {
				texts = append(texts, string(tok))
			}
		case xml.EndElement:
			inText = false
		}
	}
	if want := []int{4, 3, 1}; len(polylines) != len(want) {
		t.Fatalf("%d polylines, want %d", len(polylines), len(want))
	} else {
		for i, p := range polylines {
			if len(p) != want[i] {
				t.Errorf("polyline %d has %d points, want %d", i, len(p), want[i])
			}
		}
	}
	for _, want := range []string{`a "title" & more`, "latency <p50 & p99>", "200", "64", "p99"} {
		if !slices.Contains(texts, want) {
			t.Errorf("no text %q in %q", want, texts)
		}
	}
	for i, p := range polylines[:2] { // the first panel's
		for _, pt := range p {
			var x, y float64
			if _, err := fmt.Sscanf(pt, "%f,%f", &x, &y); err != nil {
				t.Fatalf("point %q: %v", pt, err)
			}
			if x < plotPad || x > plotW || y < 40 || y > plotH {
				t.Errorf("line %d: point %v,%v outside the first panel", i, x, y)
			}
		}
	}
}

// What work left on the broker is each stream's change per unit; a stream
// whose keys were only rewritten (the workers' heartbeats: bytes moved,
// messages did not) and one that did not move are left out, a new stream
// counts from nothing.
func TestDelta(t *testing.T) {
	t.Parallel()
	before := map[string][2]int64{"EVENTS": {1000, 10}, "KV_WORKERS": {500, 2}, "KV_RESULTS": {0, 0}, "JOBS": {40, 1}}
	after := map[string][2]int64{"EVENTS": {3000, 40}, "KV_WORKERS": {520, 2}, "KV_RESULTS": {1400, 10}, "JOBS": {40, 1}, "INDEX": {700, 20}}
	d := delta("a job", 10, before, after)
	want := map[string]int64{"EVENTS": 2000, "KV_RESULTS": 1400, "INDEX": 700}
	if len(d.bytes) != len(want) {
		t.Errorf("streams %v, want %v", d.bytes, want)
	}
	for name, b := range want {
		if d.bytes[name] != b {
			t.Errorf("%s: %d bytes, want %d", name, d.bytes[name], b)
		}
	}
	if d.perBytes() != 410 || d.perMsgs() != 6 {
		t.Errorf("per job %v bytes, %v messages; want 410, 6", d.perBytes(), d.perMsgs())
	}
	if got, want := d.byStream(), "EVENTS 200, 3.00; KV_RESULTS 140, 1.00; INDEX 70, 2.00"; got != want {
		t.Errorf("byStream %q, want %q", got, want)
	}
}

// Only the parts that ran are plotted, a job's latency in seconds and a
// session's exec in milliseconds, memory in MiB.
func TestPlotFiles(t *testing.T) {
	t.Parallel()
	f := &growthFigures{cores: 2, load: [2]string{"1.00 2 3", "4.00 5 6"},
		jobs: []latencyLevel{{level: 1, ok: []time.Duration{time.Second, 3 * time.Second}, wall: 4 * time.Second}},
		idle: []memoryLevel{{level: 0, rss: 32 << 20, heap: 4 << 20}, {level: 10, rss: 40 << 20, heap: 5 << 20}},
	}
	plots := f.plotFiles()
	var files []string
	for _, p := range plots {
		files = append(files, p.file)
	}
	if !slices.Equal(files, []string{"growth-jobs.svg", "growth-memory.svg"}) {
		t.Fatalf("files %v", files)
	}
	lat := plots[0].panels[0]
	if lat.unit != "s" || !slices.Equal(lat.lines[0].ys, []float64{3}) || !slices.Equal(plots[0].panels[1].lines[0].ys, []float64{0.5}) {
		t.Errorf("jobs: %+v, rate %+v", lat, plots[0].panels[1])
	}
	mem := plots[1].panels
	if len(mem) != 1 || !slices.Equal(mem[0].xs, []string{"0", "10"}) || !slices.Equal(mem[0].lines[0].ys, []float64{32, 40}) {
		t.Errorf("memory: %+v", mem)
	}
	if !strings.Contains(plots[0].title, "1-min load 1.00 → 4.00") {
		t.Errorf("title %q", plots[0].title)
	}
}
