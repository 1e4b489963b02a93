package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/pkg/batch"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// Code is the stable, machine-readable part of an error response. Clients
// switch on it; the message is for people and may change.
type Code string

// The codes the gateway answers with (openapi.yaml lists them too).
const (
	CodeInvalidJSON     Code = "invalid_json"    // 400: the body is not the JSON the route takes
	CodeUnknownField    Code = "unknown_field"   // 400: a field the route does not know
	CodeInvalidJob      Code = "invalid_job"     // 400: a job that fails validation
	CodeInvalidBatch    Code = "invalid_batch"   // 400: strict batch with bad lines
	CodeInvalidRequest  Code = "invalid_request" // 400: a bad query parameter or path segment
	CodeUnauthorized    Code = "unauthorized"    // 401: no token, or an unknown one
	CodeForbidden       Code = "forbidden"       // 403: the token may not do this
	CodeNotFound        Code = "not_found"       // 404: no such job, or no such route
	CodeMethodNotAllow  Code = "method_not_allowed"
	CodeRequestTimeout  Code = "request_timeout"   // 408: the body did not arrive in time
	CodeAlreadyFinished Code = "already_finished"  // 409: cancel of a finished job
	CodeIDConflict      Code = "id_conflict"       // 409: the id holds another job's result
	CodeExists          Code = "exists"            // 409: a session's path exists already
	CodeGone            Code = "gone"              // 410: the session has ended (its record says why)
	CodePaused          Code = "paused"            // 409: the session is paused: resume it first
	CodeFailed          Code = "failed"            // 422: the call failed in the session's sandbox
	CodeBodyTooLarge    Code = "body_too_large"    // 413
	CodeQueueFull       Code = "queue_full"        // 429: the fleet's queue is full; Retry-After
	CodeTooManyRequests Code = "too_many_requests" // 429: the gateway's own bounds; Retry-After
	// CodeSessionCap: over a cap of the fleet's on sessions, named in the
	// body's "cap": 429 for the live sessions a token or a tenant holds,
	// 400 for a max_lifetime or idle_timeout over its cap.
	CodeSessionCap     Code = "session_cap"
	CodeInternal       Code = "internal"        // 500: never with details
	CodeNotImplemented Code = "not_implemented" // 501
	CodeUnavailable    Code = "unavailable"     // 503: NATS or JetStream unreachable; Retry-After
	CodeBadGateway     Code = "bad_gateway"     // 502: nothing answers on a session's exposed port
	CodeGatewayTimeout Code = "gateway_timeout" // 504: an expose's port accepted nothing within its wait
)

// Error is an error with its HTTP answer. Handlers return one, or an error
// that classify maps to one.
type Error struct {
	Status     int
	Code       Code
	Message    string
	RetryAfter time.Duration // sets Retry-After when > 0
	// BadLines lists the bad lines of a strict batch.
	BadLines []BadLine
	// Cap names the cap of a session_cap (sessionapi.CapPerToken, ...).
	Cap string
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// BadLine is a line of a batch that is not a valid job.
type BadLine struct {
	Line  int       `json:"line"`
	Error ErrorBody `json:"error"`
}

// ErrorBody is the "error" object of every error response.
type ErrorBody struct {
	Code     Code      `json:"code"`
	Message  string    `json:"message"`
	BadLines []BadLine `json:"bad_lines,omitempty"`
	// Cap names the cap a session_cap is over: sessions_per_token,
	// sessions_per_tenant, max_lifetime or idle_timeout.
	Cap string `json:"cap,omitempty"`
}

func apiErr(status int, code Code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// classify maps an error to its answer: the one place that turns the
// fleet's errors into HTTP statuses and codes.
func (g *Gateway) classify(err error) *Error {
	var ae *Error
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &mbe):
		return apiErr(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "the body is over the limit of %d bytes", mbe.Limit)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return apiErr(http.StatusBadRequest, CodeInvalidRequest, "the body ended before its length")
	case errors.Is(err, os.ErrDeadlineExceeded):
		return apiErr(http.StatusRequestTimeout, CodeRequestTimeout, "the body did not arrive within %s", g.cfg.ReadTimeout)
	case errors.Is(err, jobs.ErrQueueFull):
		e := apiErr(http.StatusTooManyRequests, CodeQueueFull, "the queue is full; retry later")
		e.RetryAfter = g.cfg.RetryAfter
		return e
	case errors.Is(err, jobs.ErrInvalidJob):
		return apiErr(http.StatusBadRequest, CodeInvalidJob, "%s", err)
	case errors.Is(err, jobs.ErrNotFound):
		return apiErr(http.StatusNotFound, CodeNotFound, "no job with this id")
	case errors.Is(err, jobs.ErrNoRevision), errors.Is(err, jetstream.ErrObjectNotFound):
		return apiErr(http.StatusNotFound, CodeNotFound, "%s", err)
	case errors.Is(err, jobs.ErrConflict):
		return apiErr(http.StatusConflict, CodeIDConflict, "%s", err)
	case errors.Is(err, jobs.ErrNotTenants):
		// What reads the fleet as a whole (its status) is the operator's.
		return apiErr(http.StatusForbidden, CodeForbidden, "a tenant's token reads only its tenant's jobs and workspaces, not the fleet's status")
	case errors.Is(err, jobs.ErrFinished):
		return apiErr(http.StatusConflict, CodeAlreadyFinished, "the job has already finished")
	case errors.Is(err, batch.ErrUnavailable), errors.Is(err, context.DeadlineExceeded), isNATSDown(err):
		e := apiErr(http.StatusServiceUnavailable, CodeUnavailable, "the fleet's queue cannot be reached; retry later")
		e.RetryAfter = g.cfg.RetryAfter
		return e
	}
	return apiErr(http.StatusInternalServerError, CodeInternal, "internal error")
}

// writeError writes err as the JSON error body with its status. Internal
// errors are logged with the request, never sent: no stack, no detail.
func (g *Gateway) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := g.classify(err)
	if e.Status >= 500 {
		g.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", e.Status, "err", err)
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(max(1, e.RetryAfter.Round(time.Second)/time.Second))))
	}
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandfleet"`)
	}
	writeJSON(w, e.Status, struct {
		Error ErrorBody `json:"error"`
	}{ErrorBody{Code: e.Code, Message: e.Message, BadLines: e.BadLines, Cap: e.Cap}})
}

// writeJSON writes v as the response body with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil { // only our own types reach here
		slog.Error("encode response", "err", err)
		status, data = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}
