package main

import (
	"encoding/base64"
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// maxDisplayNames bounds how many names of the display directory are
// read: a job may fill it with empty files, and what is past the bounds is
// only counted.
const maxDisplayNames = 4096

// displayTypes are the outputs the launcher frames, by extension.
var displayTypes = map[string]string{".png": "image/png"}

// sendDisplays frames the job's display outputs (collectDisplays) after
// the job and records their count, digest and what was dropped in t.
func sendDisplays(fr *framer, t *envelope.Trailer) {
	var digest envelope.DisplayDigest
	defer func() { t.Displays, t.DisplaysSHA256 = digest.Count(), digest.Sum() }()
	items, dropped := collectDisplays()
	t.DisplaysDropped = dropped
	for _, it := range items {
		item := append(append([]byte(it.MIME), '\n'), it.Data...)
		for len(item) > envelope.MaxFramePayload {
			if fr.frame(envelope.FrameDisplayPart, item[:envelope.MaxFramePayload]) != nil {
				return
			}
			digest.Add(envelope.FrameDisplayPart, item[:envelope.MaxFramePayload])
			item = item[envelope.MaxFramePayload:]
		}
		if fr.frame(envelope.FrameDisplay, item) != nil {
			return
		}
		digest.Add(envelope.FrameDisplay, item)
	}
}

// collectDisplays reads the display outputs (see envelope.DisplayDir) in
// name order, up to envelope.MaxDisplays and MaxDisplayBytes, and counts
// the rest as dropped. The directory and its files are the job's: they
// are opened inside an os.Root (no link leads out of it, so none to the
// launcher's own /proc/self), without blocking (a FIFO), and only regular
// files are read, each to the bytes left. The directory is emptied, so
// that a session's next cell starts with none.
func collectDisplays() (items []envelope.DisplayItem, dropped int) {
	if st, err := os.Lstat(envelope.DisplayDir); err != nil || !st.IsDir() {
		return nil, 0
	}
	root, err := os.OpenRoot(envelope.DisplayDir)
	if err != nil {
		return nil, 0
	}
	defer root.Close()
	dir, err := root.Open(".")
	if err != nil {
		return nil, 0
	}
	var names []string
	for len(names) < maxDisplayNames {
		batch, err := dir.Readdirnames(256)
		names = append(names, batch...)
		if err != nil {
			break
		}
	}
	dir.Close()
	slices.Sort(names)
	left := int64(envelope.MaxDisplayBytes)
	for _, name := range names {
		mime, ok := displayTypes[strings.ToLower(nameExt(name))]
		if !ok {
			_ = root.Remove(name)
			continue
		}
		var data []byte
		if len(items) < envelope.MaxDisplays {
			data = readDisplay(root, name, left)
		}
		_ = root.Remove(name)
		if data == nil {
			dropped++
			continue
		}
		left -= int64(len(data))
		items = append(items, envelope.DisplayItem{MIME: mime, Data: data})
	}
	return items, dropped
}

// readDisplay returns the regular file name's bytes if they are some and
// at most max; nil otherwise.
func readDisplay(root *os.Root, name string, max int64) []byte {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() || st.Size() == 0 || st.Size() > max {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if (err != nil && !errors.Is(err, fs.ErrClosed)) || len(b) == 0 || int64(len(b)) > max {
		return nil
	}
	return b
}

func nameExt(name string) string {
	if i := strings.LastIndexByte(name, '.'); i > 0 {
		return name[i:]
	}
	return ""
}

// cellDisplays are a session's cell's display outputs (collectDisplays)
// as its result carries them, in base64; the worker checks each and
// states an image's size.
func cellDisplays() (ds []sessionapi.Display, dropped int) {
	items, dropped := collectDisplays()
	for _, it := range items {
		ds = append(ds, sessionapi.Display{MIME: it.MIME, Data: base64.StdEncoding.EncodeToString(it.Data)})
	}
	return ds, dropped
}
