package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// A small SVG line plot, so that the bench draws its own figures for the
// docs (tools/soak draws its curves the same way): panels side by side,
// each a few lines over the same points of x, which are levels (1, 4, 16,
// 64 callers) and so are spaced evenly and labelled, not scaled.

// plotLine is one curve of a panel: a value per level.
type plotLine struct {
	name string
	ys   []float64
}

// plotPanel is one chart: its levels, named along x, and its lines.
type plotPanel struct {
	title  string
	xlabel string // what the levels are
	unit   string // of y
	xs     []string
	lines  []plotLine
}

const (
	plotW, plotH = 400, 240 // one panel
	plotPad      = 48       // left and bottom, for the labels
)

var plotColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd"}

// writePlot writes panels side by side under title as one SVG.
func writePlot(w io.Writer, title string, panels []plotPanel) error {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n",
		max(1, len(panels))*plotW, plotH+24)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="8" y="15">%s</text>`+"\n", html.EscapeString(title))
	for i, p := range panels {
		p.draw(&b, float64(i*plotW))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// top is the y axis' top: a round number at or above every value.
func (p plotPanel) top() float64 {
	hi := 0.0
	for _, l := range p.lines {
		for _, v := range l.ys {
			if !math.IsNaN(v) {
				hi = max(hi, v)
			}
		}
	}
	return niceCeil(hi)
}

// niceCeil is the least of 1, 2, 2.5 or 5 × 10^k at or above v (1 for
// v ≤ 0).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*e >= v*(1-1e-9) {
			return m * e
		}
	}
	return 10 * e
}

// draw writes the panel with its left edge at left.
func (p plotPanel) draw(b *strings.Builder, left float64) {
	x0, y0 := left+plotPad, 40.0
	w, h := float64(plotW-plotPad-16), float64(plotH-plotPad-24)
	top := p.top()
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f">%s</text>`+"\n", x0, y0-8, html.EscapeString(p.title))
	fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", x0, y0, w, h)
	for k := 0; k <= 4; k++ { // y grid and labels
		y := y0 + h - h*float64(k)/4
		if k > 0 && k < 4 {
			fmt.Fprintf(b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#eee"/>`+"\n", x0, y, x0+w, y)
		}
		fmt.Fprintf(b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-4, y+4, trimFloat(top*float64(k)/4))
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="middle" transform="rotate(-90 %.0f %.0f)">%s</text>`+"\n",
		left+12, y0+h/2, left+12, y0+h/2, html.EscapeString(p.unit))
	xAt := func(i int) float64 {
		if len(p.xs) < 2 {
			return x0 + w/2
		}
		return x0 + 12 + (w-24)*float64(i)/float64(len(p.xs)-1)
	}
	for i, x := range p.xs {
		fmt.Fprintf(b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", xAt(i), y0+h+14, html.EscapeString(x))
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x0+w/2, y0+h+30, html.EscapeString(p.xlabel))
	for li, l := range p.lines {
		color := plotColors[li%len(plotColors)]
		var pts []string
		for i, v := range l.ys {
			if i >= len(p.xs) || math.IsNaN(v) {
				continue
			}
			x, y := xAt(i), y0+h-h*v/top
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`+"\n", x, y, color)
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", color, strings.Join(pts, " "))
		fmt.Fprintf(b, `<text x="%.0f" y="%.0f" fill="%s">%s</text>`+"\n", x0+8, y0+14+14*float64(li), color, html.EscapeString(l.name))
	}
}

// trimFloat prints v with at most two decimals and no trailing zeros.
func trimFloat(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}
