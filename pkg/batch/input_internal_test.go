package batch

import (
	"bufio"
	"strings"
	"testing"
)

// A line of exactly max bytes fits whatever its line ending; one byte more
// does not, and is consumed whole.
func TestReadLineAtTheCap(t *testing.T) {
	t.Parallel()
	const max = 10
	for _, eol := range []string{"\n", "\r\n", ""} {
		in := strings.Repeat("a", max) + eol + strings.Repeat("b", max+1) + eol + "c" + eol
		if eol == "" {
			in = strings.Repeat("a", max) // the last line, without an ending
		}
		br := bufio.NewReaderSize(strings.NewReader(in), 16)
		var buf []byte
		for i, want := range []struct {
			line    string
			tooLong bool
		}{{strings.Repeat("a", max), false}, {"", true}, {"c", false}} {
			line, tooLong, err := readLine(br, &buf, max)
			if string(line) != want.line || tooLong != want.tooLong {
				t.Errorf("eol %q, line %d: %q (too long %v, err %v), want %q (too long %v)", eol, i+1, line, tooLong, err, want.line, want.tooLong)
			}
			if eol == "" {
				break // one line only
			}
		}
	}
}
