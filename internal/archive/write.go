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
	var st Stats
	cw := &cappedWriter{w: w, max: lim.MaxBytes}
	tw := tar.NewWriter(cw)
	// Links go last: where one leads depends on the others, as the
	// extracted tree will hold them (kept is that tree's links), and
	// leaving one out can change where another leads.
	var pending []*tar.Header
	kept := linkSet{}
	put := func(hdr *tar.Header, file *os.File) error {
		if st.Files++; st.Files+len(pending) > lim.MaxFiles {
			return fmt.Errorf("%w: more than %d entries", ErrTooLarge, lim.MaxFiles)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if file != nil {
			n, err := io.CopyN(tw, file, hdr.Size)
			if err != nil && !errors.Is(err, ErrTooLarge) {
				return fmt.Errorf("%s: read %d of %d bytes: %w", field.Quote(hdr.Name), n, hdr.Size, err)
			}
			if err != nil {
				return err
			}
			st.Bytes += n
		}
		return nil
	}
	// A directory left out for its name is listed once: what is under it
	// (its names are longer still) is counted, in its reason too.
	var under struct {
		prefix string
		at, n  int // its place in st.Skips (-1: past the list), the entries under it
		why    string
	}
	endUnder := func() {
		if under.prefix != "" && under.at >= 0 && under.n > 0 {
			st.Skips[under.at].Reason = fmt.Sprintf("%s; left out with the %d entries under it", under.why, under.n)
		}
		under.prefix = ""
	}
	err := fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if under.prefix != "" {
			switch {
			case name+"/" == under.prefix:
				return nil // the directory's own read error
			case strings.HasPrefix(name, under.prefix):
				st.Skipped++
				under.n++
				return nil
			}
			endUnder()
		}
		if err != nil {
			if name == "." {
				return err
			}
			st.skip(name, whyUnreadable) // a directory whose entries cannot be read
			return nil
		}
		if name == "." {
			return nil
		}
		var hdr *tar.Header
		var file *os.File
		switch t := d.Type(); {
		case t.IsDir():
			if keep != nil {
				return nil
			}
			hdr = &tar.Header{Typeflag: tar.TypeDir, Name: name + "/"}
		case t&fs.ModeSymlink != 0:
			if keep != nil {
				return nil
			}
			target, err := root.Readlink(name)
			if err != nil {
				st.skip(name, whyUnreadable)
				return nil
			}
			hdr = &tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target}
		case t.IsRegular():
			if keep != nil && !keep(name) {
				return nil
			}
			hdr = &tar.Header{Typeflag: tar.TypeReg, Name: name}
		default:
			st.skip(name, whyType(t))
			return nil
		}
		if fi, err := root.Lstat(name); err == nil {
			hdr.Mode = int64(fi.Mode().Perm())
			hdr.ModTime = fi.ModTime().Truncate(time.Second)
		}
		if r, why := check(name, hdr); r != "" {
			if hdr.Typeflag == tar.TypeDir {
				under.prefix, under.at, under.n, under.why = name+"/", len(st.Skips), 0, why
				if len(st.Skips) >= MaxSkipsListed {
					under.at = -1
				}
			}
			st.skip(name, why)
			return nil
		}
		if hdr.Typeflag == tar.TypeReg {
			// O_NONBLOCK: a fifo swapped in since the listing must not
			// block the launcher; fstat below tells it apart.
			f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
			if err != nil {
				st.skip(name, whyUnreadable)
				return nil
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil || !fi.Mode().IsRegular() {
				st.skip(name, whyUnreadable)
				return nil
			}
			hdr.Size, file = fi.Size(), f
		}
		if hdr.Typeflag == tar.TypeSymlink {
			pending = append(pending, hdr)
			kept[name] = hdr.Linkname
			if st.Files+len(pending) > lim.MaxFiles {
				return fmt.Errorf("%w: more than %d entries", ErrTooLarge, lim.MaxFiles)
			}
			return nil
		}
		return put(hdr, file)
	})
	endUnder()
	if err != nil {
		return st, err
	}
	// Every link is judged in the tree of all the links kept so far; one
	// that leads out there is left out, and that changes no other's
	// verdict: a link whose resolution went through it led out too.
	why := map[string]string{}
	for _, hdr := range pending {
		switch out, err := leadsOut(kept, hdr.Name); {
		case err != nil:
			why[hdr.Name] = whyHops()
		case out:
			why[hdr.Name] = whyLinkOut
		}
	}
	links := pending
	pending = nil
	for _, hdr := range links {
		if w, ok := why[hdr.Name]; ok {
			st.skip(hdr.Name, w)
			continue
		}
		if err := put(hdr, nil); err != nil {
			return st, err
		}
	}
	return st, tw.Close()
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
