package archive

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/sandfleet/sandfleet/internal/field"
)

// Write archives the tree under root as a tar to w, in lexical order:
// directories, regular files, and links whose target stays inside the
// tree (see Extract). What an archive may not hold (fifos, sockets,
// devices, links leading out, what cannot be read) is left out and counted
// in Stats.Skipped; setuid, setgid and sticky bits are dropped. With keep
// set, only the regular files whose names it accepts are written, and no
// directories or links: the files a job returns.
//
// Past lim it stops with an error wrapping ErrTooLarge, and what w got is
// not a whole archive. Nothing else may write to the tree meanwhile (the
// launcher stops every other process first): a file that changes size
// while it is read is an error.
func Write(w io.Writer, root *os.Root, keep func(name string) bool, lim Limits) (Stats, error) {
	var st Stats
	cw := &cappedWriter{w: w, max: lim.MaxBytes}
	tw := tar.NewWriter(cw)
	err := fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if name == "." {
				return err
			}
			st.Skipped++ // a directory that cannot be read
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
			if err != nil || linkInside(name, target) != nil {
				st.Skipped++
				return nil
			}
			if out, err := leadsOut(root, name); err != nil || out {
				st.Skipped++
				return nil
			}
			hdr = &tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target}
		case t.IsRegular():
			if keep != nil && !keep(name) {
				return nil
			}
			// O_NONBLOCK: a fifo swapped in since the listing must not
			// block the launcher; fstat below tells it apart.
			f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
			if err != nil {
				st.Skipped++
				return nil
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil || !fi.Mode().IsRegular() {
				st.Skipped++
				return nil
			}
			hdr = &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: fi.Size()}
			file = f
		default:
			st.Skipped++
			return nil
		}
		if st.Files++; st.Files > lim.MaxFiles {
			return fmt.Errorf("%w: more than %d entries", ErrTooLarge, lim.MaxFiles)
		}
		if fi, err := root.Lstat(name); err == nil {
			hdr.Mode = int64(fi.Mode().Perm())
			hdr.ModTime = fi.ModTime().Truncate(time.Second)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if file != nil {
			n, err := io.CopyN(tw, file, hdr.Size)
			if err != nil && !errors.Is(err, ErrTooLarge) {
				return fmt.Errorf("%s: read %d of %d bytes: %w", field.Quote(name), n, hdr.Size, err)
			}
			if err != nil {
				return err
			}
			st.Bytes += n
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	return st, err
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
