package field

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestChecks(t *testing.T) {
	t.Parallel()
	many := func(n int) map[string]string {
		m := make(map[string]string, n)
		for i := range n {
			m["k"+strconv.Itoa(i)] = ""
		}
		return m
	}
	with := func(m map[string]string, prefix string, n int) map[string]string {
		for i := range n {
			m[prefix+"k"+strconv.Itoa(i)] = ""
		}
		return m
	}
	names := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "f" + strconv.Itoa(i)
		}
		return out
	}
	cases := []struct {
		name  string
		err   error
		field string // "" when the check passes
	}{
		{"plain file", FileName("a/b.py"), ""},
		{"dotdot", FileName("a/../b"), `files["a/../b"]`},
		{"absolute", FileName("/x"), `files["/x"]`},
		{"empty part", FileName("a//b"), `files["a//b"]`},
		{"NUL", FileName("a\x00"), `files["a\x00"]`},
		{"255 bytes", FileName(strings.Repeat("x", 255)), ""},
		{"256 bytes", FileName(strings.Repeat("x", 256)), `files["` + strings.Repeat("x", 64) + `..."]`},
		{"1000 files and a main file", FileNames(names(1001), 1), ""},
		{"10000 files", FileNames(names(10000), 0), "files"},
		{"empty command", Argv([]string{""}), "argv[0]"},
		{"NUL in argv", Argv([]string{"a", "b\x00"}), "argv[1]"},
		{"long arg", Argv([]string{"a", strings.Repeat("x", MaxArgBytes+1)}), "argv[1]"},
		{"too many args", Argv(make([]string, MaxArgs+1)), "argv"},
		{"env ok", Env(map[string]string{"A": "b=c"}), ""},
		{"env name with =", Env(map[string]string{"A=B": ""}), `env["A=B"]`},
		{"env value NUL", Env(map[string]string{"A": "\x00"}), `env["A"]`},
		{"env name long", Env(map[string]string{strings.Repeat("N", MaxEnvName+1): ""}), `env["` + strings.Repeat("N", 64) + `..."]`},
		{"env count", Env(many(MaxEnv + 1)), "env"},
		{"labels ok", Labels(map[string]string{"batch": "nightly é"}), ""},
		{"label count", Labels(many(MaxLabels + 1)), "labels"},
		{"the most labels and the reserved ones", Labels(with(many(MaxLabels), ReservedLabels, MaxReservedLabels)), ""},
		{"reserved label count", Labels(with(many(0), ReservedLabels, MaxReservedLabels+1)), "labels"},
		{"label key long", Labels(map[string]string{strings.Repeat("k", MaxLabelKey+1): ""}), `labels["` + strings.Repeat("k", 64) + `..."]`},
		{"label escape", Labels(map[string]string{"k": "\x1b]0;x\x07"}), `labels["k"]`},
		{"label C1", Labels(map[string]string{"k": "\u009b"}), `labels["k"]`},
		{"utf-8", UTF8("code", []byte(`"é"`)), ""},
		{"not utf-8", UTF8("code", []byte{'"', 0xff, '"'}), "code"},
	}
	for _, tc := range cases {
		var fe *Error
		switch {
		case tc.field == "" && tc.err != nil:
			t.Errorf("%s: %v, want no error", tc.name, tc.err)
		case tc.field != "" && !errors.As(tc.err, &fe):
			t.Errorf("%s: %v, want a *field.Error", tc.name, tc.err)
		case tc.field != "" && fe.Field != tc.field:
			t.Errorf("%s: field %q, want %q (%v)", tc.name, fe.Field, tc.field, tc.err)
		}
	}
}

func FuzzFileName(f *testing.F) {
	for _, s := range []string{"a", "a/b", "../x", "/x", "a//b", ".", "a/.", "x\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if FileName(name) != nil {
			return
		}
		// What passes stays inside the working directory.
		if strings.HasPrefix(name, "/") || strings.Contains("/"+name+"/", "/../") || len(name) > MaxFileName {
			t.Fatalf("accepted %q", name)
		}
	})
}
