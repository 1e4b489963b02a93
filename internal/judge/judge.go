// Package judge compares a test case's output with the expected output, as
// the launcher does inside the sandbox for a job with tests. It imports
// nothing of the project's, so that the launcher stays small.
package judge

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Comparison modes of a test case.
const (
	// Exact: the bytes must be equal.
	Exact = "exact"
	// Trimmed: equal once trailing whitespace (spaces, tabs, CRs) is cut
	// from every line and trailing blank lines are dropped. Leading
	// whitespace is significant.
	Trimmed = "trimmed"
	// Float: as Trimmed, line by line, and each line's whitespace-separated
	// tokens must be as many; a pair of tokens that both parse as numbers
	// may differ by Tolerance, absolute or relative to the expected value,
	// and any other pair must be equal.
	Float = "float"
)

// Modes lists the modes, the default first.
var Modes = []string{Exact, Trimmed, Float}

// DefaultTolerance is a Float comparison's tolerance when the case gives none.
const DefaultTolerance = 1e-6

// MaxExcerpt bounds each side of a Diff, in bytes.
const MaxExcerpt = 200

// Diff is where an output first differs from the expected one: a line
// (1-based) and a bounded excerpt of it on each side. Reason says what
// differs when the lines alone do not show it (a missing line, a token out
// of tolerance).
type Diff struct {
	Line     int    `json:"line"`
	Expected string `json:"expected"`
	Actual   string `json:"actual"`
	Reason   string `json:"reason,omitempty"`
}

// ValidMode reports whether m is a mode; "" stands for Exact.
func ValidMode(m string) bool { return m == "" || m == Exact || m == Trimmed || m == Float }

// Compare returns nil when actual matches expected under mode ("" is Exact)
// and tolerance (Float only; 0 means DefaultTolerance), else the first
// difference.
func Compare(mode string, tolerance float64, expected, actual []byte) *Diff {
	switch mode {
	case "", Exact:
		if bytes.Equal(expected, actual) {
			return nil
		}
		return firstDiff(splitLines(expected, false), splitLines(actual, false), nil)
	case Trimmed:
		return firstDiff(splitLines(expected, true), splitLines(actual, true), nil)
	case Float:
		if tolerance <= 0 {
			tolerance = DefaultTolerance
		}
		return firstDiff(splitLines(expected, true), splitLines(actual, true), func(e, a string) string {
			return floatLine(tolerance, e, a)
		})
	}
	return &Diff{Reason: fmt.Sprintf("unknown comparison mode %q", mode)}
}

// splitLines cuts b at each '\n'. trimmed cuts trailing whitespace from
// each line and drops trailing blank lines.
func splitLines(b []byte, trimmed bool) []string {
	s := string(b)
	if !trimmed {
		return strings.SplitAfter(s, "\n") // keeps the newlines: "a" and "a\n" differ
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t\r\f\v")
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// firstDiff finds the first line that differs: by equality, or by same
// (which returns why two lines differ, "" when they match).
func firstDiff(exp, act []string, same func(e, a string) string) *Diff {
	for i := 0; i < max(len(exp), len(act)); i++ {
		switch {
		case i >= len(exp):
			return &Diff{Line: i + 1, Actual: Excerpt(act[i]), Reason: fmt.Sprintf("%d lines expected, got more", len(exp))}
		case i >= len(act):
			return &Diff{Line: i + 1, Expected: Excerpt(exp[i]), Reason: fmt.Sprintf("%d lines expected, got %d", len(exp), len(act))}
		}
		why := ""
		if same != nil {
			why = same(exp[i], act[i])
		} else if exp[i] != act[i] {
			why = "-"
		}
		if why != "" {
			d := &Diff{Line: i + 1, Expected: Excerpt(exp[i]), Actual: Excerpt(act[i])}
			if why != "-" {
				d.Reason = why
			}
			return d
		}
	}
	return nil
}

// floatLine compares two lines token by token.
func floatLine(tol float64, e, a string) string {
	et, at := strings.Fields(e), strings.Fields(a)
	if len(et) != len(at) {
		return fmt.Sprintf("%d tokens expected, got %d", len(et), len(at))
	}
	for i := range et {
		if et[i] == at[i] {
			continue
		}
		x, errx := strconv.ParseFloat(et[i], 64)
		y, erry := strconv.ParseFloat(at[i], 64)
		if errx != nil || erry != nil || math.IsNaN(x) || math.IsNaN(y) {
			return fmt.Sprintf("token %d differs", i+1)
		}
		// An infinity is within no tolerance of anything but itself: |x-y|
		// and tol*|x| are both +Inf, and Inf <= Inf would let any number
		// (or a finite x with a large tolerance, any infinity) pass.
		if math.IsInf(x, 0) || math.IsInf(y, 0) {
			if x != y {
				return fmt.Sprintf("token %d: %s is not %s", i+1, Excerpt(at[i]), Excerpt(et[i]))
			}
			continue
		}
		if d := math.Abs(x - y); !(d <= tol || d <= tol*math.Abs(x)) {
			return fmt.Sprintf("token %d: %s is not within %g of %s", i+1, Excerpt(at[i]), tol, Excerpt(et[i]))
		}
	}
	return ""
}

// Excerpt cuts s to at most MaxExcerpt bytes at a character boundary,
// marking the cut, and replaces what is not UTF-8.
func Excerpt(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxExcerpt {
		return s
	}
	cut := MaxExcerpt - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
