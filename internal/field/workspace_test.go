package field

import (
	"errors"
	"strings"
	"testing"
)

func TestWorkspaceChecks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		at   string // the field the error names; "" when valid
	}{
		{"name ok", Name("workspace", "agent-7_A"), ""},
		{"name empty", Name("workspace", ""), "workspace"},
		{"name dot", Name("workspace", "a.b"), "workspace"},
		{"name slash", Name("workspace", "a/b"), "workspace"},
		{"name long", Name("workspace", strings.Repeat("a", 129)), "workspace"},
		{"globs ok", Outputs([]string{"*.png", "results/**", "**/*.csv", "a/[bc]?.txt"}), ""},
		{"glob absolute", Outputs([]string{"*.png", "/etc/*"}), "outputs[1]"},
		{"glob dotdot", Outputs([]string{"../*"}), "outputs[0]"},
		{"glob dot", Outputs([]string{"./x"}), "outputs[0]"},
		{"glob empty part", Outputs([]string{"a//b"}), "outputs[0]"},
		{"glob empty", Outputs([]string{""}), "outputs[0]"},
		{"glob bad class", Outputs([]string{"[a"}), "outputs[0]"},
		{"glob partial **", Outputs([]string{"a**"}), "outputs[0]"},
		{"glob NUL", Outputs([]string{"a\x00"}), "outputs[0]"},
		{"too many globs", Outputs(make([]string, MaxOutputs+1)), "outputs"},
	} {
		var fe *Error
		switch {
		case tc.at == "" && tc.err != nil:
			t.Errorf("%s: %v", tc.name, tc.err)
		case tc.at != "" && (!errors.As(tc.err, &fe) || fe.Field != tc.at):
			t.Errorf("%s: %v, want an error naming %s", tc.name, tc.err, tc.at)
		}
	}
}
