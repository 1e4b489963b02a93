package jobs

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseWorkspaceRef(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]WorkspaceRef{
		"base":       {Name: "base"},
		"base@3":     {Name: "base", Revision: 3},
		"a-b_c@12":   {Name: "a-b_c", Revision: 12},
		"t-1.base@3": {Name: "t-1.base", Revision: 3}, // a tenant's
	} {
		got, err := ParseWorkspaceRef(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("%q: %+v %v", in, got, err)
		}
	}
	for _, in := range []string{"", "@3", "base@", "base@0", "base@-1", "base@x", "a/b", "A.b@1", "a.b.c", "a.", ".b", "-a.b"} {
		if _, err := ParseWorkspaceRef(in); !errors.Is(err, ErrInvalidJob) {
			t.Errorf("%q: %v, want ErrInvalidJob", in, err)
		}
	}
}

// The wire names of the workspace fields, as docs/workspaces.md documents them.
func TestWorkspaceJSON(t *testing.T) {
	t.Parallel()
	j, err := Decode([]byte(`{"image":"python","code":"x","workspace":"agent-7",
		"workspace_from":{"name":"base","revision":3},"outputs":["*.png","results/**"]}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	j.Normalize()
	if err := j.Validate(); err != nil || j.Workspace != "agent-7" || j.WorkspaceFrom.Revision != 3 || len(j.Outputs) != 2 {
		t.Fatalf("%+v %v", j, err)
	}
	res := Result{ID: "x", Workspace: &WorkspaceStep{Name: "agent-7", From: WorkspaceRef{Name: "agent-7", Revision: 4}, Revision: 5, Replayed: true},
		Artifacts:        []Artifact{{Name: "plot.png", Size: 3, SHA256: "ab", Key: "x/plot.png"}},
		ArtifactsSkipped: []SkippedArtifact{{Name: "big.png", Size: 9, Reason: "over"}}}
	data, _ := json.Marshal(res)
	for _, k := range []string{`"workspace":{"name":"agent-7","from":{"name":"agent-7","revision":4},"revision":5,"replayed":true}`,
		`"artifacts":[{"name":"plot.png","size":3,"sha256":"ab","key":"x/plot.png"}]`,
		`"artifacts_skipped":[{"name":"big.png","size":9,"reason":"over"}]`} {
		if !strings.Contains(string(data), k) {
			t.Errorf("result JSON %s lacks %s", data, k)
		}
	}
	plain, _ := json.Marshal(Result{ID: "y"})
	if strings.Contains(string(plain), "workspace") || strings.Contains(string(plain), "artifacts") {
		t.Errorf("a result without workspace names one: %s", plain)
	}
}

// A step's skipped entries come with their reasons; a result stored by a
// worker that only counted them still decodes, the count kept.
func TestWorkspaceStepSkipped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want WorkspaceStep
	}{
		{`{"revision":2,"skipped":[{"name":"p","reason":"a fifo is not kept in a workspace"}],"skipped_more":4}`,
			WorkspaceStep{Revision: 2, Skipped: []SkippedEntry{{Name: "p", Reason: "a fifo is not kept in a workspace"}}, SkippedMore: 4}},
		{`{"revision":2,"skipped":3}`, WorkspaceStep{Revision: 2, SkippedMore: 3}},
		{`{"revision":2,"from":{"name":"w","revision":1}}`, WorkspaceStep{Revision: 2, From: WorkspaceRef{Name: "w", Revision: 1}}},
	} {
		var got WorkspaceStep
		if err := json.Unmarshal([]byte(tc.in), &got); err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		back, _ := json.Marshal(got)
		var again WorkspaceStep
		if err := json.Unmarshal(back, &again); err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("%s: again %+v, %v", back, again, err)
		}
	}
	if err := json.Unmarshal([]byte(`{"skipped":"x"}`), new(WorkspaceStep)); err == nil {
		t.Error(`"skipped":"x" decoded`)
	}
}
