package executor

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// pngHeader is the start of a w×h PNG: enough for pngSize.
func pngHeader(w, h uint32) []byte {
	b := []byte("\x89PNG\r\n\x1a\n")
	b = binary.BigEndian.AppendUint32(b, 13)
	b = append(b, "IHDR"...)
	b = binary.BigEndian.AppendUint32(b, w)
	return binary.BigEndian.AppendUint32(b, h)
}

// Display outputs count only when the signed trailer covers exactly the
// display frames that came: one it did not count voids the verdict, as
// output bytes it did not count do.
func TestVerdictDisplays(t *testing.T) {
	t.Parallel()
	seal := envelope.NewSeal()
	item := append([]byte("image/png\n"), pngHeader(4, 3)...)
	var d envelope.DisplayDigest
	d.Add(envelope.FrameDisplay, item)
	tr := envelope.Trailer{Displays: d.Count(), DisplaysSHA256: d.Sum(), DisplaysDropped: 2}

	o := observed{trailer: seal.Sign(tr), displays: [][]byte{item}, displaysN: 1, displaysSHA: d.Sum()}
	out := verdict(o, seal, limits.Default())
	if out.status != jobs.StatusSucceeded || len(out.display) != 1 || out.displayDropped != 2 ||
		out.display[0].Width != 4 || out.display[0].Height != 3 {
		t.Fatalf("%s (%s), %+v, %d dropped: want succeeded, one 4x3 output, 2 dropped", out.status, out.msg, out.display, out.displayDropped)
	}

	d.Add(envelope.FrameDisplay, item) // a second output the trailer does not count
	o.displays, o.displaysN, o.displaysSHA = [][]byte{item, item}, d.Count(), d.Sum()
	out = verdict(o, seal, limits.Default())
	if out.status != jobs.StatusFailed || out.display != nil {
		t.Fatalf("%s, %d outputs: want failed (no verdict) and none", out.status, len(out.display))
	}
}

func TestDecodeDisplays(t *testing.T) {
	t.Parallel()
	items := [][]byte{
		append([]byte("image/png\n"), pngHeader(640, 480)...),
		append([]byte("image/svg+xml\n"), "<svg/>"...), // a type not shown
		[]byte("image/png"), // no newline
		append([]byte("image/png\n"), "GIF89a......................."...),
		append([]byte("image/png\n"), pngHeader(0, 5)...),
		append([]byte("image/png\n"), pngHeader(1<<20, 5)...),
	}
	out, dropped := decodeDisplays(items)
	if len(out) != 1 || dropped != 5 || out[0].Width != 640 || out[0].Height != 480 || out[0].MIME != "image/png" {
		t.Fatalf("%+v, %d dropped: want one 640x480 PNG and 5 dropped", out, dropped)
	}
}

func FuzzDecodeDisplays(f *testing.F) {
	f.Add(append([]byte("image/png\n"), pngHeader(3, 2)...))
	f.Add([]byte("image/png\n\x89PNG"))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, dropped := decodeDisplays([][]byte{b})
		if len(out)+dropped != 1 {
			t.Fatalf("%d out, %d dropped: want one or the other", len(out), dropped)
		}
		if len(out) == 1 && (out[0].Width <= 0 || out[0].Height <= 0 || !bytes.HasPrefix(b, []byte("image/png\n"))) {
			t.Fatalf("accepted %q as %+v", b, out[0])
		}
	})
}
