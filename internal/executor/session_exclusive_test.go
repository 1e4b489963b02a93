package executor

import (
	"encoding/json"
	"testing"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// A reply to an exclusive exec that does not say it ran exclusively (an
// agent older than the option ran it beside the session's processes) is
// withheld; every other reply passes as it came.
func TestUnprotectedReplyWithheld(t *testing.T) {
	t.Parallel()
	zero := 0
	exec := func(exclusive bool) envelope.Request {
		r, _ := envelope.NewRequest(sessionapi.OpExec, sessionapi.ExecRequest{Shell: "true", Exclusive: exclusive})
		return *r
	}
	reply := func(res sessionapi.ExecResult) envelope.Reply {
		b, _ := json.Marshal(res)
		return envelope.Reply{ID: 3, Result: b}
	}
	for _, tc := range []struct {
		name     string
		req      envelope.Request
		rep      envelope.Reply
		withheld bool
	}{
		{"exclusive, ran alone", exec(true), reply(sessionapi.ExecResult{ExitCode: &zero, Exclusive: true}), false},
		{"exclusive, an old agent", exec(true), reply(sessionapi.ExecResult{ExitCode: &zero, Stdout: "FORGED"}), true},
		{"exclusive, refused", exec(true), envelope.Reply{ID: 3, Error: sessionapi.Errorf(sessionapi.ErrFailed, "refused")}, false},
		{"a plain exec", exec(false), reply(sessionapi.ExecResult{ExitCode: &zero}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := unprotected(&tc.req, &tc.rep)
			if !tc.withheld {
				if got != &tc.rep {
					t.Fatalf("got %+v, want the reply as it came", got)
				}
				return
			}
			if got.ID != 3 || got.Error == nil || got.Error.Code != sessionapi.ErrFailed.Code || got.Result != nil {
				t.Fatalf("got %+v, want a failure with no result", got)
			}
		})
	}
}
