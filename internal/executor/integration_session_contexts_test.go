package executor

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// A session's contexts by name: one started explicitly in a directory
// runs its cells there, is listed with the directory its shell moved to
// and the cells it ran, keeps its name from a second start, and once
// ended is gone from the list and its name free; the session keeps at
// most sessionapi.MaxContexts.
func TestIntegrationSessionContexts(t *testing.T) {
	langsRuntimes(t, func(t *testing.T, e *Executor) {
		if !nodeRuns(t, e) {
			return
		}
		s := startSession(t, e, SessionSpec{Image: "node"})
		okReply(t, do(t, s, ask{Op: sessionapi.OpExec, Shell: "mkdir -p src/deep"}))
		wantErr := func(what string, r *answer, sentinel *sessionapi.Error) {
			t.Helper()
			if r.Error == nil || !errors.Is(r.Error, sentinel) {
				t.Errorf("%s: %v, want %s", what, r.Error, sentinel.Code)
			}
		}
		r := okReply(t, do(t, s, ask{Op: sessionapi.OpContext, Name: "sh", Language: "bash", Cwd: "src"}))
		if len(r.Contexts) != 1 || r.Contexts[0].Name != "sh" || r.Contexts[0].Language != "bash" || !strings.HasSuffix(r.Contexts[0].Cwd, "/src") {
			t.Fatalf("started %+v, want sh, bash, in src", r.Contexts)
		}
		wantErr("a name taken", do(t, s, ask{Op: sessionapi.OpContext, Name: "sh", Language: "python"}), sessionapi.ErrExists)
		wantErr("a cwd outside the tree", do(t, s, ask{Op: sessionapi.OpContext, Language: "bash", Cwd: "/etc"}), sessionapi.ErrInvalid)
		wantErr("a cwd that is no directory", do(t, s, ask{Op: sessionapi.OpContext, Language: "bash", Cwd: "nope"}), sessionapi.ErrInvalid)
		wantErr("a name with a slash", do(t, s, ask{Op: sessionapi.OpContext, Name: "a/b", Language: "bash"}), sessionapi.ErrInvalid)

		cell := okReply(t, do(t, s, ask{Op: sessionapi.OpCode, Context: "sh", Language: "bash", Code: "pwd; cd deep; X=7", Timeout: ms(30000)}))
		if !strings.HasSuffix(string(cell.Stdout), "/src\n") || cell.Reset || cell.CodeError != nil {
			t.Fatalf("a cell of sh: %q reset %v error %v, want it run in src, in the context started", cell.Stdout, cell.Reset, cell.CodeError)
		}
		r = okReply(t, do(t, s, ask{Op: sessionapi.OpContext, Language: "python"}))
		if r.Contexts[0].Name != "default" {
			t.Errorf("a python context without a name is %q, want default", r.Contexts[0].Name)
		}
		list := okReply(t, do(t, s, ask{Op: sessionapi.OpContexts})).Contexts
		if len(list) != 2 || list[0].Name != "default" || list[1].Name != "sh" {
			t.Fatalf("listed %+v, want default and sh", list)
		}
		if sh := list[1]; sh.Cells != 1 || !strings.HasSuffix(sh.Cwd, "/src/deep") || sh.Created == 0 {
			t.Errorf("sh listed %+v, want 1 cell, in src/deep (its cd), a start time", sh)
		}

		okReply(t, do(t, s, ask{Op: sessionapi.OpEndContext, Name: "sh"}))
		wantErr("an end of an ended context", do(t, s, ask{Op: sessionapi.OpEndContext, Name: "sh"}), sessionapi.ErrNotFound)
		if list := okReply(t, do(t, s, ask{Op: sessionapi.OpContexts})).Contexts; len(list) != 1 || list[0].Name != "default" {
			t.Fatalf("after the end, listed %+v, want default alone", list)
		}
		cell = okReply(t, do(t, s, ask{Op: sessionapi.OpCode, Context: "sh", Language: "bash", Code: "pwd; echo \"[$X]\"", Timeout: ms(30000)}))
		if !cell.Reset || strings.Contains(string(cell.Stdout), "/src") || !strings.HasSuffix(string(cell.Stdout), "[]\n") {
			t.Errorf("a cell in the ended name: %q reset %v, want a fresh shell in the session's directory", cell.Stdout, cell.Reset)
		}

		for i := 2; i < sessionapi.MaxContexts; i++ {
			okReply(t, do(t, s, ask{Op: sessionapi.OpContext, Name: fmt.Sprint("b", i), Language: "bash"}))
		}
		wantErr("a context over the cap", do(t, s, ask{Op: sessionapi.OpContext, Language: "bash"}), sessionapi.ErrLimit)
		wantErr("a cell starting a context over the cap", do(t, s, ask{Op: sessionapi.OpCode, Context: "more", Language: "bash", Code: "true"}), sessionapi.ErrLimit)
	})
}
