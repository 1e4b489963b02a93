// Package shorten cuts text to a size in bytes without splitting a UTF-8
// character, for the places that quote untrusted strings in errors and
// tables or fit output into a bound. It imports only the standard library:
// internal/field uses it, and the launcher imports internal/field.
package shorten

import "unicode/utf8"

// Ellipsis marks a string that Text shortened.
const Ellipsis = "..."

// Text returns s unchanged when it is at most n bytes, else its first n
// bytes or fewer (Cut) followed by Ellipsis.
func Text(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return Cut(s, n) + Ellipsis
}

// Cut returns s cut to at most n bytes at the start of a character, so
// that a character of several bytes is dropped whole rather than split
// into bytes that are not UTF-8.
func Cut(s string, n int) string {
	if n >= len(s) {
		return s
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
