package cmdline

import (
	"errors"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/pkg/limits"
)

func TestParse(t *testing.T) {
	t.Parallel()
	newSet := func() (*bool, *limits.Size, *string) {
		return new(bool), new(limits.Size), new(string)
	}
	tests := []struct {
		args    []string
		err     error  // nil, ErrHelp or ErrUsage
		message string // in the error
		pos     []string
	}{
		{args: []string{"a", "--json", "b", "--memory", "1g", "-c", "x"}, pos: []string{"a", "b"}},
		{args: []string{"--memory=1g", "--", "--json"}, pos: []string{"--json"}},
		{args: []string{"-"}, pos: []string{"-"}},
		{args: []string{"--help"}, err: ErrHelp},
		{args: []string{"a", "-h"}, err: ErrHelp},
		{args: []string{"--bogus"}, err: ErrUsage, message: "unknown flag: --bogus"},
		{args: []string{"-json"}, err: ErrUsage, message: "long flags take two dashes: --json"},
		{args: []string{"-memory=1g"}, err: ErrUsage, message: "--memory"},
		{args: []string{"--memory", "lots"}, err: ErrUsage, message: "invalid size"},
		{args: []string{"-c"}, err: ErrUsage, message: "needs an argument"},
	}
	for _, tc := range tests {
		fs := NewFlagSet("test")
		jsonOut, mem, code := newSet()
		fs.BoolVar(jsonOut, "json", false, "")
		fs.Var(Value(mem, "size"), "memory", "")
		fs.StringVarP(code, "code", "c", "", "")
		err := Parse(fs, tc.args)
		switch {
		case tc.err == nil && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.err != nil && !errors.Is(err, tc.err):
			t.Errorf("%q: %v, want %v", tc.args, err, tc.err)
		case err != nil && !strings.Contains(err.Error(), tc.message):
			t.Errorf("%q: %q, want it to say %q", tc.args, err, tc.message)
		case err == nil && strings.Join(fs.Args(), " ") != strings.Join(tc.pos, " "):
			t.Errorf("%q: arguments %q, want %q", tc.args, fs.Args(), tc.pos)
		}
	}
}

func TestUsagefWraps(t *testing.T) {
	t.Parallel()
	base := errors.New("base")
	err := Usagef("--x: %w", base)
	if !errors.Is(err, ErrUsage) || !errors.Is(err, base) || err.Error() != "--x: base" {
		t.Errorf("%v", err)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	if got := Version("v1.2.3"); got != "v1.2.3" {
		t.Errorf("set by ldflags: %q", got)
	}
	setting := func(kv ...string) []debug.BuildSetting {
		var out []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			out = append(out, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	tests := []struct {
		main     string
		settings []debug.BuildSetting
		want     string
	}{
		{"v0.3.0", nil, "v0.3.0"},
		{"v0.0.0-20261125120000-0123456789ab+dirty", nil, "v0.0.0-20261125120000-0123456789ab+dirty"},
		{"(devel)", setting("vcs.revision", "0123456789abcdef0123", "vcs.modified", "false"), "0123456789ab"},
		{"(devel)", setting("vcs.revision", "0123456789abcdef0123", "vcs.modified", "true"), "0123456789ab-dirty"},
		{"", nil, "dev"},
		{"(devel)", nil, "dev"},
	}
	for _, tc := range tests {
		bi := &debug.BuildInfo{Main: debug.Module{Version: tc.main}, Settings: tc.settings}
		if got := buildVersion(bi); got != tc.want {
			t.Errorf("%q %v: %q, want %q", tc.main, tc.settings, got, tc.want)
		}
	}
}
