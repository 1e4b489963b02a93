package judge

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCompare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, mode string
		tol        float64
		exp, act   string
		line       int // 0: equal
	}{
		{"exact equal", Exact, 0, "3\n", "3\n", 0},
		{"exact default mode", "", 0, "3\n", "3\n", 0},
		{"exact missing newline", Exact, 0, "3\n", "3", 1},
		{"exact trailing space", Exact, 0, "3\n", "3 \n", 1},
		{"exact second line", Exact, 0, "1\n2\n", "1\n3\n", 2},
		{"exact extra line", Exact, 0, "1\n", "1\n2\n", 2},
		{"trimmed trailing space and blank lines", Trimmed, 0, "1\n2\n", "1  \n2\r\n\n\n", 0},
		{"trimmed leading space matters", Trimmed, 0, "1\n", " 1\n", 1},
		{"trimmed missing line", Trimmed, 0, "1\n2\n", "1\n", 2},
		{"float within", Float, 1e-3, "0.3333 1\n", "0.33331 1.0000\n", 0},
		{"float relative", Float, 1e-6, "1000000000\n", "1000000001\n", 0},
		{"float outside", Float, 1e-6, "0.5\n", "0.6\n", 1},
		{"float words exact", Float, 0, "yes 1\n", "no 1\n", 1},
		{"float token count", Float, 0, "1 2\n", "1\n", 1},
		{"float nan is a word", Float, 0, "nan\n", "NaN\n", 1},
		{"float default tolerance", Float, 0, "1.0000001\n", "1\n", 0},
		{"float infinity is not any number", Float, 0, "inf\n", "0\n", 1},
		{"float infinity is not its opposite", Float, 0, "inf\n", "-inf\n", 1},
		{"float negative infinity", Float, 0, "-inf\n", "12345\n", 1},
		{"float infinity is not the largest number", Float, 0, "Infinity\n", "1e308\n", 1},
		{"float infinity in a line", Float, 0, "1 inf\n", "1 -3\n", 1},
		{"float infinity spelled otherwise", Float, 0, "inf\n", "+Infinity\n", 0},
		{"float a large tolerance takes no infinity", Float, 10, "1e308\n", "inf\n", 1},
		{"empty", Exact, 0, "", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Compare(tc.mode, tc.tol, []byte(tc.exp), []byte(tc.act))
			switch {
			case tc.line == 0 && d != nil:
				t.Fatalf("want equal, got %+v", d)
			case tc.line != 0 && d == nil:
				t.Fatalf("want a difference at line %d, got none", tc.line)
			case tc.line != 0 && d.Line != tc.line:
				t.Fatalf("want line %d, got %+v", tc.line, d)
			}
		})
	}
}

func TestCompareUnknownMode(t *testing.T) {
	t.Parallel()
	if d := Compare("fuzzy", 0, []byte("a"), []byte("a")); d == nil || !strings.Contains(d.Reason, "fuzzy") {
		t.Fatalf("got %+v", d)
	}
}

func TestExcerptBounded(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 500) + "\xff"
	d := Compare(Exact, 0, []byte(long), []byte("x"))
	if len(d.Expected) > MaxExcerpt || !utf8.ValidString(d.Expected) || !strings.HasSuffix(d.Expected, "…") {
		t.Fatalf("excerpt %d bytes, valid %v: %q", len(d.Expected), utf8.ValidString(d.Expected), d.Expected[len(d.Expected)-8:])
	}
}

func FuzzCompare(f *testing.F) {
	f.Add("exact", 0.0, "1\n2\n", "1\n2\n")
	f.Add("float", 1e-3, "0.5 x\n", "0.5001 x")
	f.Add("trimmed", 0.0, "a \n\n", "a")
	f.Add("float", 0.0, "inf -inf\n", "0 -inf\n")
	f.Fuzz(func(t *testing.T, mode string, tol float64, exp, act string) {
		d := Compare(mode, tol, []byte(exp), []byte(act))
		if d != nil && (len(d.Expected) > MaxExcerpt || len(d.Actual) > MaxExcerpt) {
			t.Fatalf("unbounded diff: %d, %d bytes", len(d.Expected), len(d.Actual))
		}
		if ValidMode(mode) && exp == act && d != nil {
			t.Fatalf("equal outputs differ under %q: %+v", mode, d)
		}
	})
}
