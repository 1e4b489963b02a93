package gateway

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// Every code a session may answer has its HTTP answer, as the API has
// always given it; one of a newer worker's that this gateway does not
// know is a failed call.
func TestSessionErrorCodes(t *testing.T) {
	t.Parallel()
	g := &Gateway{cfg: Config{RetryAfter: 3 * time.Second}}
	for _, c := range sessionapi.Codes() {
		if _, ok := sessionStatus[c.Code]; !ok {
			t.Errorf("session code %q has no HTTP answer", c.Code)
		}
	}
	for _, tc := range []struct {
		err    error
		status int
		code   Code
		retry  bool
	}{
		{sessionapi.Errorf(sessionapi.ErrNotFound, "x"), http.StatusNotFound, CodeNotFound, false},
		{sessionapi.Errorf(sessionapi.ErrGone, "x"), http.StatusGone, CodeGone, false},
		{sessionapi.CapErrorf(sessionapi.CapPerToken, "x"), http.StatusTooManyRequests, CodeSessionCap, false},
		{sessionapi.CapErrorf(sessionapi.CapMaxLifetime, "x"), http.StatusBadRequest, CodeSessionCap, false},
		{sessionapi.CapErrorf(sessionapi.CapIdleTimeout, "x"), http.StatusBadRequest, CodeSessionCap, false},
		{sessionapi.Errorf(sessionapi.ErrFull, "x"), http.StatusTooManyRequests, CodeTooManyRequests, true},
		{sessionapi.Errorf(sessionapi.ErrLimit, "x"), http.StatusTooManyRequests, CodeTooManyRequests, true},
		{sessionapi.Errorf(sessionapi.ErrInvalid, "x"), http.StatusBadRequest, CodeInvalidRequest, false},
		{sessionapi.Errorf(sessionapi.ErrExists, "x"), http.StatusConflict, CodeExists, false},
		{sessionapi.Errorf(sessionapi.ErrPaused, "x"), http.StatusConflict, CodePaused, false},
		{sessionapi.Errorf(sessionapi.ErrFailed, "x"), http.StatusUnprocessableEntity, CodeFailed, false},
		{&sessionapi.Error{Code: "newer", Message: "x"}, http.StatusUnprocessableEntity, CodeFailed, false},
	} {
		var e *Error
		if !errors.As(g.sessionErr(tc.err), &e) {
			t.Fatalf("%v: not an API error", tc.err)
		}
		if e.Status != tc.status || e.Code != tc.code || (e.RetryAfter != 0) != tc.retry {
			t.Errorf("%v: %d %s retry-after %v, want %d %s %v", tc.err, e.Status, e.Code, e.RetryAfter, tc.status, tc.code, tc.retry)
		}
	}
}
