package executor

import (
	"bytes"
	"encoding/base64"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// decodeDisplays turns the launcher's display outputs (a type, a newline,
// the bytes) into the result's, with the count of those dropped: of a type
// not shown, or not what the type says (envelope.CheckDisplay).
func decodeDisplays(items [][]byte) (out []jobs.Display, dropped int) {
	for _, it := range items {
		mime, data, ok := bytes.Cut(it, []byte("\n"))
		w, h, shown := envelope.CheckDisplay(string(mime), data)
		if !ok || !shown {
			dropped++
			continue
		}
		out = append(out, jobs.Display{MIME: string(mime), Data: base64.StdEncoding.EncodeToString(data), Width: w, Height: h})
	}
	return out, dropped
}
