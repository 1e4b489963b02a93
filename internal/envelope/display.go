package envelope

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
)

// A job's display outputs (a notebook's display data: the figures a
// matplotlib program shows) are files the job writes into DisplayDir, one
// per output, named so that their order is the name order, with the
// extension saying the type (".png": image/png). The data image's
// matplotlib backend writes them; any program may. After the job the
// launcher frames them back, each as FrameDisplayPart frames and a last
// FrameDisplay frame whose payloads together are the type, a newline and
// the bytes; the trailer counts them, those it dropped, and gives the
// SHA-256 of the frames (see DisplayDigest). They are the job's own bytes:
// the executor checks only that they came through the launcher, and they
// are shown, never acted on.
const (
	FrameDisplayPart byte = 'i'
	FrameDisplay     byte = 'd'
)

// A session's code cell returns its display outputs in its Reply
// (Display), collected from the same directory after the cell; the
// Python context driver has the data image's backend write the figures
// still open at the end of each cell, as a notebook shows them.

// DisplayDir is where a job leaves its display outputs: on the /tmp tmpfs,
// out of the workspace, so that they are never an artifact or part of a
// workspace's step.
const DisplayDir = "/tmp/.sandfleet-display"

// The bounds of one job's display outputs: past MaxDisplays outputs, or
// MaxDisplayBytes of them in all, the rest are dropped and counted.
const (
	MaxDisplays     = 16
	MaxDisplayBytes = 2 << 20
)

// DisplayDigest accumulates the SHA-256 of the display frames, each as
// its kind, its length and its payload, as both the launcher and the
// executor compute it.
type DisplayDigest struct {
	h hash.Hash
	n int // FrameDisplay frames: outputs
}

// Add counts one display frame.
func (d *DisplayDigest) Add(kind byte, p []byte) {
	if d.h == nil {
		d.h = sha256.New()
	}
	var l [5]byte
	l[0] = kind
	binary.BigEndian.PutUint32(l[1:], uint32(len(p)))
	d.h.Write(l[:])
	d.h.Write(p)
	if kind == FrameDisplay {
		d.n++
	}
}

// Count is the number of outputs added.
func (d *DisplayDigest) Count() int { return d.n }

// Sum is the hex digest; "" when nothing was added.
func (d *DisplayDigest) Sum() string {
	if d.h == nil {
		return ""
	}
	return hex.EncodeToString(d.h.Sum(nil))
}

// DisplayItem is one display output as the launcher collected it: its
// type and the job's bytes.
type DisplayItem struct {
	MIME string `json:"mime"`
	Data []byte `json:"data"`
}

// pngSignature opens every PNG file; its IHDR chunk follows at once.
var pngSignature = []byte("\x89PNG\r\n\x1a\n")

// maxDisplayPixels bounds an image's width and height as a result gives
// them: PNG allows 2^31-1, which no figure is.
const maxDisplayPixels = 1 << 16

// CheckDisplay reports whether data is what mime says, of a type shown
// (image/png only), and an image's size from its header. It checks only
// what a result states of the bytes: they are the job's, shown and never
// acted on.
func CheckDisplay(mime string, data []byte) (width, height int, ok bool) {
	if mime != "image/png" || len(data) < 24 || !bytes.HasPrefix(data, pngSignature) ||
		binary.BigEndian.Uint32(data[8:12]) != 13 || string(data[12:16]) != "IHDR" {
		return 0, 0, false
	}
	w, h := int(binary.BigEndian.Uint32(data[16:20])), int(binary.BigEndian.Uint32(data[20:24]))
	if w <= 0 || h <= 0 || w > maxDisplayPixels || h > maxDisplayPixels {
		return 0, 0, false
	}
	return w, h, true
}
