package sessionhost

import (
	"encoding/base64"
	"encoding/binary"
	"testing"

	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// A cell's display outputs reach the caller with their size, and one
// that is not what its type says is counted as dropped.
func TestCheckDisplays(t *testing.T) {
	t.Parallel()
	png := []byte("\x89PNG\r\n\x1a\n")
	png = binary.BigEndian.AppendUint32(png, 13)
	png = append(png, "IHDR"...)
	png = binary.BigEndian.AppendUint32(png, 30)
	png = binary.BigEndian.AppendUint32(png, 20)
	b64 := base64.StdEncoding.EncodeToString
	r := &sessionapi.CodeResult{Text: "1", DisplayDropped: 3, Display: []sessionapi.Display{
		{MIME: "image/png", Data: b64(png), Width: 1, Height: 1},
		{MIME: "image/png", Data: b64([]byte("<svg/>"))},
		{MIME: "text/html", Data: b64([]byte("<b>"))},
		{MIME: "image/png", Data: "not base64!"},
	}}
	checkDisplays(r)
	if len(r.Display) != 1 || r.DisplayDropped != 6 || r.Text != "1" {
		t.Fatalf("%d outputs, %d dropped: want 1 and 6", len(r.Display), r.DisplayDropped)
	}
	d := r.Display[0]
	if b, _ := base64.StdEncoding.DecodeString(d.Data); string(b) != string(png) || d.Width != 30 || d.Height != 20 || d.MIME != "image/png" {
		t.Fatalf("%+v: want the PNG, 30x20", d)
	}
}
