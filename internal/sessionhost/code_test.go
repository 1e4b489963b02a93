package sessionhost

import (
	"encoding/base64"
	"encoding/binary"
	"testing"

	"github.com/sandfleet/sandfleet/internal/envelope"
)

// A cell's display outputs reach the caller as base64 with their size,
// and one that is not what its type says is counted as dropped.
func TestCodeResultDisplay(t *testing.T) {
	t.Parallel()
	png := []byte("\x89PNG\r\n\x1a\n")
	png = binary.BigEndian.AppendUint32(png, 13)
	png = append(png, "IHDR"...)
	png = binary.BigEndian.AppendUint32(png, 30)
	png = binary.BigEndian.AppendUint32(png, 20)
	r := codeResult(&envelope.Reply{Text: "1", DisplayDropped: 3, Display: []envelope.DisplayItem{
		{MIME: "image/png", Data: png},
		{MIME: "image/png", Data: []byte("<svg/>")},
		{MIME: "text/html", Data: []byte("<b>")},
	}})
	if len(r.Display) != 1 || r.DisplayDropped != 5 || r.Text != "1" {
		t.Fatalf("%d outputs, %d dropped: want 1 and 5", len(r.Display), r.DisplayDropped)
	}
	d := r.Display[0]
	if b, _ := base64.StdEncoding.DecodeString(d.Data); string(b) != string(png) || d.Width != 30 || d.Height != 20 || d.MIME != "image/png" {
		t.Fatalf("%+v: want the PNG, 30x20", d)
	}
}
