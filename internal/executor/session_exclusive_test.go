package executor

import (
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
	for _, tc := range []struct {
		name     string
		req      envelope.Request
		rep      envelope.Reply
		withheld bool
	}{
		{"exclusive, ran alone", envelope.Request{Op: sessionapi.OpExec, Exclusive: true}, envelope.Reply{ID: 3, Exit: &zero, Exclusive: true}, false},
		{"exclusive, an old agent", envelope.Request{Op: sessionapi.OpExec, Exclusive: true}, envelope.Reply{ID: 3, Exit: &zero, Stdout: []byte("FORGED")}, true},
		{"exclusive, refused", envelope.Request{Op: sessionapi.OpExec, Exclusive: true}, envelope.Reply{ID: 3, Error: sessionapi.Errorf(sessionapi.ErrFailed, "refused")}, false},
		{"a plain exec", envelope.Request{Op: sessionapi.OpExec}, envelope.Reply{ID: 3, Exit: &zero}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := unprotected(&tc.req, &tc.rep)
			if !tc.withheld {
				if got != &tc.rep {
					t.Fatalf("got %+v, want the reply as it came", got)
				}
				return
			}
			if got.ID != 3 || got.Error == nil || got.Error.Code != sessionapi.ErrFailed.Code || got.Exit != nil || got.Stdout != nil {
				t.Fatalf("got %+v, want a failure with no result", got)
			}
		})
	}
}
