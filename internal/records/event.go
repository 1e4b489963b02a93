package records

import (
	"encoding/json"
	"strings"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// MarshalEvent encodes an event as it is published: JSON without HTML
// escaping, so that '<' in a job's output takes one byte, not six.
func MarshalEvent(e *jobs.Event) ([]byte, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, err
	}
	return []byte(strings.TrimSuffix(b.String(), "\n")), nil
}
