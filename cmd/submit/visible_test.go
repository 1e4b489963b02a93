package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestVisible(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", ""},
		{"plain text\n\tindented\n", "plain text\n\tindented\n"},
		{"héllo wörld ✓ 日本", "héllo wörld ✓ 日本"},
		{"\ufffd stays", "\ufffd stays"}, // an encoded U+FFFD is text
		{"\x1b]0;TITLE\x07", "^[]0;TITLE^G"},
		{"\x1b[2J\x1b[H", "^[[2J^[[H"},
		{"\x1b]52;c;ZXZpbA==\x07", "^[]52;c;ZXZpbA==^G"},
		{"FAILED\r\x1b[Kfake: all tests passed\n", "FAILED^M^[[Kfake: all tests passed\n"},
		{"\x00\x01\x08\x0b\x0c\x1f", "^@^A^H^K^L^_"},
		{"del\x7f", "del^?"},
		{"lone \x9b byte, \xff, \xc3", `lone \x9b byte, \xff, \xc3`},
		{"c1 \u009b31m and \u0085", `c1 \u009b31m and \u0085`},
		{"bidi \u202eevil\u202c \u2066x\u2069", `bidi \u202eevil\u202c \u2066x\u2069`},
	}
	for _, tc := range tests {
		if got := visible(tc.in); got != tc.want {
			t.Errorf("visible(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestVisibleJSON(t *testing.T) {
	t.Parallel()
	in, _ := json.Marshal(map[string]string{"stdout": "a\x1b[2J\x7f\u009b\u202eb ✓"})
	got := string(visibleJSON(in))
	want := `{"stdout":"a\u001b[2J\u007f\u009b\u202eb ✓"}`
	if got != want {
		t.Errorf("visibleJSON = %s, want %s", got, want)
	}
	plain := []byte(`{"a":"ok"}`)
	if got := visibleJSON(plain); &got[0] != &plain[0] {
		t.Error("JSON without hazards is copied")
	}
}

// checkVisible fails unless out has no character that visible shows.
func checkVisible(t *testing.T, in, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("visible(%q) = %q: not UTF-8", in, out)
	}
	for _, r := range out {
		if shown(r, utf8.RuneLen(r)) {
			t.Fatalf("visible(%q) = %q: keeps %U", in, out, r)
		}
	}
}

func FuzzVisible(f *testing.F) {
	for _, s := range []string{"", "ok\n", "\x1b]0;T\x07", "\r\x1b[K", "\x9b", "\u009b", "\xc2", "\u202e", "\ufffd"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := visible(s)
		checkVisible(t, s, out)
		if again := visible(out); again != out {
			t.Fatalf("not idempotent: %q -> %q -> %q", s, out, again)
		}
		if !strings.ContainsFunc(s, func(r rune) bool { return shown(r, utf8.RuneLen(r)) }) && utf8.ValidString(s) && out != s {
			t.Fatalf("text without controls changed: %q -> %q", s, out)
		}
		// The --json form: the same value, nothing a terminal acts on.
		data, _ := json.Marshal(s)
		safe := visibleJSON(data)
		var back, orig string
		if err := json.Unmarshal(safe, &back); err != nil {
			t.Fatalf("visibleJSON(%s) = %s: %v", data, safe, err)
		}
		json.Unmarshal(data, &orig)
		if !reflect.DeepEqual(back, orig) {
			t.Fatalf("visibleJSON changed the value: %q -> %q", orig, back)
		}
		checkVisible(t, string(data), string(safe))
	})
}
