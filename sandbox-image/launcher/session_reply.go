package main

import (
	"encoding/json"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// A session operation's request comes as the session's own (sessionapi)
// in the request's Body, and its answer goes as the session's own result
// in the reply's Result: what the caller sent and gets, unchanged but for
// the bounds the worker set.

// fail answers request id with an error of sentinel's code, which the
// session host hands the caller as it is.
func fail(id uint64, sentinel *sessionapi.Error, format string, args ...any) *envelope.Reply {
	return &envelope.Reply{ID: id, Error: sessionapi.Errorf(sentinel, format, args...)}
}

// done answers request id with result, the sessionapi result of its op.
func done(id uint64, result any) *envelope.Reply {
	b, err := json.Marshal(result)
	if err != nil {
		return fail(id, sessionapi.ErrFailed, "the result: %v", err)
	}
	return &envelope.Reply{ID: id, Result: b}
}

// with decodes req's Body, the sessionapi request of its op, and serves
// it by fn.
func with[B any](req *envelope.Request, fn func(id uint64, body *B) *envelope.Reply) *envelope.Reply {
	var b B
	if len(req.Body) > 0 {
		if err := json.Unmarshal(req.Body, &b); err != nil {
			return fail(req.ID, sessionapi.ErrInvalid, "%s: %v", req.Op, err)
		}
	}
	return fn(req.ID, &b)
}
