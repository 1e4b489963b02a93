package shorten

import (
	"testing"
	"unicode/utf8"
)

func TestText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		s    string
		n    int
		want string
	}{
		{"empty", "", 3, ""},
		{"shorter", "ab", 3, "ab"},
		{"exactly n", "abc", 3, "abc"},
		{"longer", "abcd", 3, "abc..."},
		{"zero", "abc", 0, "..."},
		{"negative", "abc", -1, "..."},
		{"two-byte character kept whole", "aé", 3, "aé"},
		{"two-byte character not split", "aéb", 2, "a..."},
		{"three-byte character not split", "a€b", 3, "a..."},
		{"four-byte character not split", "😀😀", 7, "😀..."},
		{"cut at a boundary", "éé", 2, "é..."},
		{"only a multi-byte character", "😀x", 3, "..."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Text(tc.s, tc.n)
			if got != tc.want {
				t.Fatalf("Text(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
			}
			if utf8.ValidString(tc.s) && !utf8.ValidString(got) {
				t.Fatalf("Text(%q, %d) = %q is not UTF-8", tc.s, tc.n, got)
			}
		})
	}
}

func TestCut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abc", 2, "ab"},
		{"aé", 2, "a"},
		{"a€", 3, "a"},
		{"a€", 4, "a€"},
		{"\xff\xfe", 1, "\xff"}, // not UTF-8: each byte stands alone
	} {
		if got := Cut(tc.s, tc.n); got != tc.want {
			t.Errorf("Cut(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

func FuzzCut(f *testing.F) {
	f.Add("héllo wörld", 4)
	f.Fuzz(func(t *testing.T, s string, n int) {
		got := Cut(s, n)
		if len(got) > max(n, 0) || got != s[:len(got)] {
			t.Fatalf("Cut(%q, %d) = %q", s, n, got)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Cut(%q, %d) = %q is not UTF-8", s, n, got)
		}
	})
}
