package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"golang.org/x/term"
)

// A job's output is untrusted: printed raw on a terminal, escape sequences
// in it would act on the user's terminal (set its title, clear the screen,
// write the clipboard with OSC 52, or overwrite "FAILED" with a line of
// the job's choosing). So on a terminal submit shows them instead, and
// passes bytes through unchanged to pipes and files, which scripts rely on
// (and with --raw).

// isTerminal is Main.IsTerminal's default: w is a file that is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// visible returns s with every character a terminal would act on, other
// than newline and tab, written as visible text:
//
//   - C0 controls in caret notation: ESC as ^[, CR as ^M, BEL as ^G, NUL
//     as ^@; DEL as ^?;
//   - C1 controls (U+0080-U+009F; U+009B is a CSI to some terminals) and the
//     bidirectional embeddings, overrides and isolates, which reorder what
//     is shown, as \u009b, \u202e;
//   - bytes that are not UTF-8 (a lone 0x9b is a CSI to others) as \x9b.
//
// The result is valid UTF-8 free of them, so visible(visible(s)) ==
// visible(s).
func visible(s string) string {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if shown(r, size) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case !shown(r, size):
			b.WriteString(s[i : i+size])
		case r == utf8.RuneError:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x20:
			b.WriteByte('^')
			b.WriteByte(byte(r) + 0x40)
		case r == 0x7f:
			b.WriteString("^?")
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += size
	}
	return b.String()
}

// shown reports whether the rune r, size bytes long, is made visible.
func shown(r rune, size int) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r == utf8.RuneError && size == 1:
		return true // not UTF-8; an encoded U+FFFD (3 bytes) is text
	case r < 0x20:
		return true
	}
	return hazard(r)
}

// hazard reports whether r, a valid rune of 0x20 or more, is one that a
// terminal acts on or that reorders the text around it.
func hazard(r rune) bool {
	return r >= 0x7f && r <= 0x9f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}

// visibleJSON returns JSON made by encoding/json with the characters that
// it leaves raw and a terminal acts on (DEL, C1 controls, bidirectional
// overrides) written as \u escapes: the same JSON value, safe to show.
// encoding/json already escapes C0 controls and replaces invalid UTF-8.
func visibleJSON(data []byte) []byte {
	s := string(data)
	var b strings.Builder
	last := 0
	for i, r := range s {
		if r >= 0x7f && hazard(r) {
			b.WriteString(s[last:i])
			fmt.Fprintf(&b, `\u%04x`, r)
			last = i + utf8.RuneLen(r)
		}
	}
	if last == 0 {
		return data
	}
	b.WriteString(s[last:])
	return []byte(b.String())
}
