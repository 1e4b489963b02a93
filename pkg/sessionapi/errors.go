package sessionapi

import (
	"errors"
	"fmt"
)

// Error is a failed call: a stable code and a message. The agent in the
// sandbox answers with it too, and its code reaches the caller as the
// agent gave it.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Cap names the cap an ErrCap is over (CapPerToken, ...).
	Cap string `json:"cap,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("session: %s: %s", e.Code, e.Message) }

// Is makes errors.Is(err, ErrNotFound) and the like true for an Error of
// that code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Code == e.Code
}

// The codes of Error, as sentinels for errors.Is. The agent in the
// sandbox answers ErrInvalid, ErrNotFound, ErrExists, ErrLimit and
// ErrFailed; the rest are the worker's.
var (
	ErrNotFound = &Error{Code: "not_found"} // no such session (or not the caller's), file, process or context
	ErrGone     = &Error{Code: "gone"}      // the session has ended; its Info says why
	ErrFull     = &Error{Code: "full"}      // no worker has room for another session
	ErrInvalid  = &Error{Code: "invalid"}   // a bad request: a path outside the tree, a missing field
	ErrLimit    = &Error{Code: "limit"}     // over a bound of the session (processes, message size)
	ErrExists   = &Error{Code: "exists"}    // the path exists already
	ErrFailed   = &Error{Code: "failed"}    // the call failed in the sandbox (its message says how)
	ErrPaused   = &Error{Code: "paused"}    // the session is paused: resume it first
	ErrCap      = &Error{Code: "cap"}       // over a cap of the fleet's on what a caller may hold or ask (Error.Cap names it)
)

// Codes returns every code's sentinel, for those who map them (the
// gateway to HTTP statuses).
func Codes() []*Error {
	return []*Error{ErrNotFound, ErrGone, ErrFull, ErrInvalid, ErrLimit, ErrExists, ErrFailed, ErrPaused, ErrCap}
}

// The caps an ErrCap names (Error.Cap): the live sessions (running or
// resuming) one token, or all the tokens of one tenant, hold; the most a
// create may ask for max_lifetime and idle_timeout. The operator sets
// them on the workers (cmd/worker's --session-max-* flags).
const (
	CapPerToken    = "sessions_per_token"
	CapPerTenant   = "sessions_per_tenant"
	CapMaxLifetime = "max_lifetime"
	CapIdleTimeout = "idle_timeout"
)

// CapErrorf returns an ErrCap naming cap.
func CapErrorf(cap, format string, args ...any) *Error {
	return &Error{Code: ErrCap.Code, Cap: cap, Message: fmt.Sprintf(format, args...)}
}

// Errorf returns an Error of sentinel's code.
func Errorf(sentinel *Error, format string, args ...any) *Error {
	return &Error{Code: sentinel.Code, Message: fmt.Sprintf(format, args...)}
}

// AsError returns err's *Error, or nil.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}
