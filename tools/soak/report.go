package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// sample is what the worker held at one point of the run.
type sample struct {
	at         time.Duration
	label      string // "idle" for the sample after the load stopped
	rss, live  float64
	goroutines float64
	fds        float64
	unremov    float64
	containers map[string]int
	networks   int
	dataBytes  int64
	streamB    uint64 // the JetStream streams' bytes
	streamMsgs uint64 // and messages
	deleted    int    // the worker's fds of unlinked files
	jobs       int    // jobs sent so far
	job, cell  [2]time.Duration
}

func (w *workerProc) sample(at time.Duration, l *load) sample {
	m := w.metrics()
	s := sample{at: at, rss: m["process_resident_memory_bytes"], live: m["go_gc_heap_live_bytes"],
		goroutines: m["go_goroutines"], fds: m["process_open_fds"], unremov: m["sandfleet_sandboxes_unremovable"],
		containers: w.containers(), networks: w.networks(), deleted: w.deletedFiles()}
	s.dataBytes = -1 // not ours to see with -nats
	if w.data != "" {
		s.dataBytes = dirSize(w.data)
	}
	s.streamB, s.streamMsgs = w.streams()
	if l != nil {
		s.job, s.cell, s.jobs = l.interval()
	}
	return s
}

// streams sums the JetStream's streams' bytes and messages (every
// stream of the server the worker is on: in -nats mode, others' too).
func (w *workerProc) streams() (bytes, msgs uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l := w.js.ListStreams(ctx)
	for info := range l.Info() {
		bytes += info.State.Bytes
		msgs += info.State.Msgs
	}
	return bytes, msgs
}

func dataMiB(b int64) string {
	if b < 0 {
		return "-"
	}
	return mib(float64(b))
}

func mib(b float64) string { return fmt.Sprintf("%.1f", b/(1<<20)) }

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%d", d.Milliseconds())
}

func states(m map[string]int) string {
	if len(m) == 0 {
		return "0"
	}
	var k []string
	for s, n := range m {
		k = append(k, fmt.Sprintf("%s:%d", s, n))
	}
	sort.Strings(k)
	return strings.Join(k, ",")
}

func (s sample) cols() []string {
	at := s.at.Round(time.Second).String()
	if s.label != "" {
		at = s.label
	}
	return []string{at, fmt.Sprint(s.jobs), mib(s.rss), mib(s.live), fmt.Sprint(s.goroutines), fmt.Sprint(s.fds),
		states(s.containers), fmt.Sprint(s.networks), dataMiB(s.dataBytes),
		fmt.Sprintf("%s / %d", mib(float64(s.streamB)), s.streamMsgs), ms(s.job[0]), ms(s.job[1]),
		ms(s.cell[0]), ms(s.cell[1]), fmt.Sprint(s.unremov)}
}

var header = []string{"at", "jobs", "RSS MiB", "live heap MiB", "goroutines", "fds", "containers", "egress networks",
	"data MiB", "streams MiB / msgs", "quick p50 ms", "quick p99 ms", "cell p50 ms", "cell p99 ms", "unremovable"}

func (s sample) line() string { return strings.Join(s.cols(), "\t") }

// printTable prints the samples as a Markdown table.
func printTable(w io.Writer, samples []sample) {
	fmt.Fprintln(w, "| "+strings.Join(header, " | ")+" |")
	fmt.Fprintln(w, "|"+strings.Repeat("---|", len(header)))
	for _, s := range samples {
		fmt.Fprintln(w, "| "+strings.Join(s.cols(), " | ")+" |")
	}
}

func writeTSV(path string, samples []sample) error {
	var b strings.Builder
	b.WriteString(strings.Join(header, "\t") + "\n")
	for _, s := range samples {
		b.WriteString(s.line() + "\n")
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// series is one curve of the SVG: a value per sample under load.
type series struct {
	title string
	unit  string
	lines [][]float64 // one or two lines (p50 and p99)
}

// writeSVG draws each series in a panel of its own, against time, from
// the samples taken under load (the idle one is left out).
func writeSVG(path string, samples []sample, o options) error {
	var load []sample
	for _, s := range samples {
		if s.label == "" {
			load = append(load, s)
		}
	}
	get := func(f func(s sample) float64) []float64 {
		v := make([]float64, len(load))
		for i, s := range load {
			v[i] = f(s)
		}
		return v
	}
	msf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	panels := []series{
		{"RSS", "MiB", [][]float64{get(func(s sample) float64 { return s.rss / (1 << 20) })}},
		{"live heap after GC", "MiB", [][]float64{get(func(s sample) float64 { return s.live / (1 << 20) })}},
		{"goroutines", "", [][]float64{get(func(s sample) float64 { return s.goroutines })}}, {"open fds", "", [][]float64{get(func(s sample) float64 { return s.fds })}},
		{"quick job p50 / p99", "ms", [][]float64{get(func(s sample) float64 { return msf(s.job[0]) }), get(func(s sample) float64 { return msf(s.job[1]) })}},
		{"session cell p50 / p99", "ms", [][]float64{get(func(s sample) float64 { return msf(s.cell[0]) }), get(func(s sample) float64 { return msf(s.cell[1]) })}},
	}
	const pw, ph, pad = 420, 180, 40
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", 2*pw, (len(panels)+1)/2*ph+20)
	fmt.Fprintf(&b, `<text x="8" y="14">sandfleet soak: %s at %.2f jobs/s, a session every %s, sampled every %s</text>`+"\n", o.duration, o.rate, o.sessionEvery, o.every)
	colors := []string{"#1f77b4", "#d62728"}
	for i, p := range panels {
		x0, y0 := float64(i%2*pw+pad), float64(i/2*ph+20+pad/2)
		w, h := float64(pw-pad-10), float64(ph-pad-10)
		hi := 0.0
		for _, l := range p.lines {
			for _, v := range l {
				hi = max(hi, v)
			}
		}
		if hi == 0 {
			hi = 1
		}
		hi *= 1.1
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", x0, y0, w, h)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s (%s; top %.0f)</text>`+"\n", x0, y0-4, p.title, p.unit, hi)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">0</text><text x="%.0f" y="%.0f" text-anchor="end">%s</text>`+"\n",
			x0, y0+h+12, x0+w, y0+h+12, load[len(load)-1].at.Round(time.Second))
		for li, l := range p.lines {
			var pts []string
			for j, v := range l {
				x := x0
				if len(l) > 1 {
					x += w * float64(j) / float64(len(l)-1)
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y0+h-h*v/hi))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", colors[li%2], strings.Join(pts, " "))
		}
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
