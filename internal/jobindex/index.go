// Package jobindex reads the job index, the stream INDEX that workers
// append a record to as each job starts and ends (internal/records writes
// and defines them: records.Summary, records.Spec): what the console
// lists, filters and links to without reading every result. It is the
// operator's: a tenant's credentials cannot read INDEX.
package jobindex

import (
	"encoding/json"

	"github.com/sandfleet/sandfleet/internal/records"
)

// decodeSummary parses a summary record.
func decodeSummary(data []byte) (*records.Summary, error) {
	var s records.Summary
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, err
	}
	return &s, nil
}
