package archive

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/sandfleet/sandfleet/internal/field"
)

// Write archives the tree under root as a tar to w: directories and
// regular files in lexical order, then the links whose target stays
// inside the tree (see Extract), also in lexical order. Each entry is held
// to Extract's rules: what would break one (fifos, sockets, devices, links
// leading out, a name the restore refuses, what cannot be read) is left
// out and listed in Stats.Skips with the reason; setuid, setgid and sticky
// bits are dropped. With keep set, only the regular files whose names it
// accepts are written, and no directories or links: the files a job
// returns.
//
// Past lim it stops with an error wrapping ErrTooLarge, and what w got is
// not a whole archive. Nothing else may write to the tree meanwhile (the
// launcher stops every other process first): a file that changes size
// while it is read is an error.
func Write(w io.Writer, root *os.Root, keep func(name string) bool, lim Limits) (Stats, error) {
	tw := &treeWriter{root: root, keep: keep, lim: lim, kept: linkSet{}}
	tw.tw = tar.NewWriter(&cappedWriter{w: w, max: lim.MaxBytes})
	err := fs.WalkDir(root.FS(), ".", tw.entry)
	tw.endUnder()
	if err != nil {
		return tw.st, err
	}
	if err := tw.links(); err != nil {
		return tw.st, err
	}
	return tw.st, tw.tw.Close()
}

// treeWriter is one Write's state.
type treeWriter struct {
	root *os.Root
	keep func(name string) bool
	lim  Limits
	tw   *tar.Writer
	st   Stats
	// Links go last: where one leads depends on the others, as the
	// extracted tree will hold them (kept is that tree's links), and
	// leaving one out can change where another leads.
	pending []*tar.Header
	kept    linkSet
	// A directory left out for its name is listed once: what is under it
	// (its names are longer still) is counted, in its reason too.
	under struct {
		prefix string
		at, n  int // its place in st.Skips (-1: past the list), the entries under it
		why    string
	}
}

// put writes one entry, and file's bytes for a regular file.
func (t *treeWriter) put(hdr *tar.Header, file *os.File) error {
	if t.st.Files++; t.st.Files+len(t.pending) > t.lim.MaxFiles {
		return fmt.Errorf("%w: more than %d entries", ErrTooLarge, t.lim.MaxFiles)
	}
	if err := t.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if file != nil {
		n, err := io.CopyN(t.tw, file, hdr.Size)
		if err != nil && !errors.Is(err, ErrTooLarge) {
			return fmt.Errorf("%s: read %d of %d bytes: %w", field.Quote(hdr.Name), n, hdr.Size, err)
		}
		if err != nil {
			return err
		}
		t.st.Bytes += n
	}
	return nil
}

func (t *treeWriter) endUnder() {
	u := &t.under
	if u.prefix != "" && u.at >= 0 && u.n > 0 {
		t.st.Skips[u.at].Reason = fmt.Sprintf("%s; left out with the %d entries under it", u.why, u.n)
	}
	u.prefix = ""
}

// entry is the walk's function: each name is left out with its reason,
// written, or (a link) kept for the end.
func (t *treeWriter) entry(name string, d fs.DirEntry, err error) error {
	if u := &t.under; u.prefix != "" {
		switch {
		case name+"/" == u.prefix:
			return nil // the directory's own read error
		case strings.HasPrefix(name, u.prefix):
			t.st.Skipped++
			u.n++
			return nil
		}
		t.endUnder()
	}
	if err != nil {
		if name == "." {
			return err
		}
		t.st.skip(name, whyUnreadable) // a directory whose entries cannot be read
		return nil
	}
	if name == "." {
		return nil
	}
	hdr := t.header(name, d.Type())
	if hdr == nil {
		return nil
	}
	if r, why := check(name, hdr); r != "" {
		if hdr.Typeflag == tar.TypeDir {
			t.under.prefix, t.under.at, t.under.n, t.under.why = name+"/", len(t.st.Skips), 0, why
			if len(t.st.Skips) >= MaxSkipsListed {
				t.under.at = -1
			}
		}
		t.st.skip(name, why)
		return nil
	}
	switch hdr.Typeflag {
	case tar.TypeReg:
		// O_NONBLOCK: a fifo swapped in since the listing must not
		// block the launcher; fstat below tells it apart.
		f, err := t.root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			t.st.skip(name, whyUnreadable)
			return nil
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			t.st.skip(name, whyUnreadable)
			return nil
		}
		hdr.Size = fi.Size()
		return t.put(hdr, f)
	case tar.TypeSymlink:
		t.pending = append(t.pending, hdr)
		t.kept[name] = hdr.Linkname
		if t.st.Files+len(t.pending) > t.lim.MaxFiles {
			return fmt.Errorf("%w: more than %d entries", ErrTooLarge, t.lim.MaxFiles)
		}
		return nil
	}
	return t.put(hdr, nil)
}

// header is name's entry as the archive would hold it, or nil for one
// left out: by keep, or (listed) for its type or a link unread.
func (t *treeWriter) header(name string, typ fs.FileMode) *tar.Header {
	var hdr *tar.Header
	switch {
	case typ.IsDir():
		if t.keep != nil {
			return nil
		}
		hdr = &tar.Header{Typeflag: tar.TypeDir, Name: name + "/"}
	case typ&fs.ModeSymlink != 0:
		if t.keep != nil {
			return nil
		}
		target, err := t.root.Readlink(name)
		if err != nil {
			t.st.skip(name, whyUnreadable)
			return nil
		}
		hdr = &tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target}
	case typ.IsRegular():
		if t.keep != nil && !t.keep(name) {
			return nil
		}
		hdr = &tar.Header{Typeflag: tar.TypeReg, Name: name}
	default:
		t.st.skip(name, whyType(typ))
		return nil
	}
	if fi, err := t.root.Lstat(name); err == nil {
		hdr.Mode = int64(fi.Mode().Perm())
		hdr.ModTime = fi.ModTime().Truncate(time.Second)
	}
	return hdr
}

// links writes the links kept, last. Every link is judged in the tree of
// all the links kept so far; one that leads out there is left out, and
// that changes no other's verdict: a link whose resolution went through
// it led out too.
func (t *treeWriter) links() error {
	why := map[string]string{}
	for _, hdr := range t.pending {
		switch out, err := leadsOut(t.kept, hdr.Name); {
		case err != nil:
			why[hdr.Name] = whyHops()
		case out:
			why[hdr.Name] = whyLinkOut
		}
	}
	links := t.pending
	t.pending = nil
	for _, hdr := range links {
		if w, ok := why[hdr.Name]; ok {
			t.st.skip(hdr.Name, w)
			continue
		}
		if err := t.put(hdr, nil); err != nil {
			return err
		}
	}
	return nil
}

// cappedWriter passes at most max bytes on, and fails past them.
type cappedWriter struct {
	w      io.Writer
	max, n int64
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.max-c.n {
		return 0, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, c.max)
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
