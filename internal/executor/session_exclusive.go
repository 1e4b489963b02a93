package executor

import (
	"encoding/json"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// unprotected turns the reply to an exclusive exec that did not run
// exclusively into a failure: an agent older than the option ignores it,
// and the command ran beside the session's other processes, which could
// write into its output. Its result is not handed on as if it were
// protected.
func unprotected(req *envelope.Request, rep *envelope.Reply) *envelope.Reply {
	var asked, ran struct{ Exclusive bool }
	if req.Op != sessionapi.OpExec || rep.Error != nil || json.Unmarshal(req.Body, &asked) != nil || !asked.Exclusive {
		return rep
	}
	if json.Unmarshal(rep.Result, &ran) == nil && ran.Exclusive {
		return rep
	}
	return &envelope.Reply{ID: rep.ID, Error: sessionapi.Errorf(sessionapi.ErrFailed,
		"exclusive: the sandbox's agent ran the command beside the session's other processes (its image predates exclusive exec); the result is withheld")}
}
