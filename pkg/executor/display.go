package executor

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// pngSignature opens every PNG file; its IHDR chunk follows at once.
var pngSignature = []byte("\x89PNG\r\n\x1a\n")

// maxDisplayPixels bounds an image's width and height as the result gives
// them: PNG allows 2^31-1, which no figure is.
const maxDisplayPixels = 1 << 16

// decodeDisplays turns the launcher's display outputs (a type, a newline,
// the bytes) into the result's, with the count of those dropped: of a type
// not shown, or not what the type says. The bytes are the job's: this
// checks only what the result states of them (an image's size, from its
// header), and nothing ever acts on them.
func decodeDisplays(items [][]byte) (out []jobs.Display, dropped int) {
	for _, it := range items {
		mime, data, ok := bytes.Cut(it, []byte("\n"))
		if !ok || string(mime) != "image/png" {
			dropped++
			continue
		}
		w, h, ok := pngSize(data)
		if !ok {
			dropped++
			continue
		}
		out = append(out, jobs.Display{MIME: string(mime), Data: base64.StdEncoding.EncodeToString(data), Width: w, Height: h})
	}
	return out, dropped
}

// pngSize reads a PNG's width and height from its IHDR chunk.
func pngSize(b []byte) (w, h int, ok bool) {
	if len(b) < 24 || !bytes.HasPrefix(b, pngSignature) ||
		binary.BigEndian.Uint32(b[8:12]) != 13 || string(b[12:16]) != "IHDR" {
		return 0, 0, false
	}
	w, h = int(binary.BigEndian.Uint32(b[16:20])), int(binary.BigEndian.Uint32(b[20:24]))
	if w <= 0 || h <= 0 || w > maxDisplayPixels || h > maxDisplayPixels {
		return 0, 0, false
	}
	return w, h, true
}
