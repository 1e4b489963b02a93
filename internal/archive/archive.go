// Package archive reads and writes the tar archives of a workspace: the
// snapshot the launcher restores into the working directory before a job
// and writes after it, and the files a job returns as artifacts.
//
// Both sides hold the same rules (rules.go, one list), so that what Write
// produces Extract accepts, and nothing else: directories, regular files
// and symbolic links whose target stays inside the tree, with permission
// bits only (no setuid, setgid or sticky bit), names of 1 to 255 bytes
// that are relative and free of "." and ".." parts, at most
// Limits.MaxFiles entries and Limits.MaxBytes bytes. Write leaves out what
// breaks a rule and lists it, with the rule's reason, in Stats.Skips.
// Extract refuses anything else outright (hard links, devices, fifos,
// sparse files, a symlink that leads out, a name given twice) and checks
// the limits while it reads, before it writes a byte past them; every write
// goes through an os.Root, so that nothing lands outside the tree even
// through a link the archive made a moment before.
//
// The launcher runs Extract and Write inside the sandbox, as the sandbox
// user; the worker only reads archives (to pick artifacts out of them), and
// `submit workspace get` extracts one on the user's machine with the same
// rules. The package imports nothing of the project's but internal/field,
// so that the launcher stays small.
package archive

import (
	"archive/tar"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sandfleet/sandfleet/internal/field"
)

// DefaultMaxFiles bounds the entries of a snapshot: files, directories and
// links together.
const DefaultMaxFiles = 100_000

// maxLinkHops is how many symbolic links a resolution follows before it
// gives up, as the kernel's MAXSYMLINKS.
const maxLinkHops = 40

// Limits bound an archive.
type Limits struct {
	// MaxBytes bounds the archive's own size in bytes, and so the sum of its
	// files' sizes (a sparse file counts its full size).
	MaxBytes int64
	// MaxFiles bounds its entries.
	MaxFiles int
}

// Stats describe an archive that was read or written.
type Stats struct {
	Files int   // entries: directories, regular files and links
	Bytes int64 // the sum of the regular files' sizes
	// Write: entries left out (fifos, sockets, devices, links leading out,
	// names the restore refuses, what cannot be read), and the first
	// MaxSkipsListed of them with the reason.
	Skipped int
	Skips   []Skip
}

// Skip is an entry Write left out, and why.
type Skip struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// MaxSkipsListed bounds Stats.Skips; Stats.Skipped counts them all.
const MaxSkipsListed = 100

func (st *Stats) skip(name, reason string) {
	st.Skipped++
	if len(st.Skips) < MaxSkipsListed {
		st.Skips = append(st.Skips, Skip{Name: name, Reason: reason})
	}
}

var (
	// ErrRefused is wrapped by every error of Extract about the archive's
	// content: it holds something no launcher writes.
	ErrRefused = errors.New("archive refused")
	// ErrTooLarge is wrapped by the errors of Write and Extract for an
	// archive over its Limits.
	ErrTooLarge = errors.New("archive over its limit")
)

func refuse(name, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrRefused, field.Quote(name), fmt.Sprintf(format, args...))
}

// Extract reads a tar archive from r into the tree under root, with the
// rules of the package. On an error, what was extracted so far stays, but
// never a link that leads out.
func Extract(root *os.Root, r io.Reader, lim Limits) (st Stats, err error) {
	tr := tar.NewReader(r)
	seen := map[string]bool{}
	var links []string
	// Links are checked once all are made, whatever stopped the
	// extraction: one made later may change where an earlier one leads.
	checked := false
	defer func() {
		if !checked {
			err = cmp.Or(err, removeLinksOut(root, links))
		}
	}()
	var dirs []dirMode
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return st, fmt.Errorf("%w: not a tar archive the launcher wrote: %v", ErrRefused, err)
		}
		st.Files++
		if st.Files > lim.MaxFiles {
			return st, fmt.Errorf("%w: %w: more than %d entries", ErrRefused, ErrTooLarge, lim.MaxFiles)
		}
		name := hdr.Name
		if hdr.Typeflag == tar.TypeDir {
			name = strings.TrimSuffix(name, "/")
		}
		if r, why := check(name, hdr); r != "" {
			return st, refuse(name, "%s", why)
		}
		if seen[name] {
			return st, refuse(name, "given twice")
		}
		seen[name] = true
		perm := fs.FileMode(hdr.Mode) & fs.ModePerm
		switch hdr.Typeflag {
		case tar.TypeReg: // the reader turns the old TypeRegA into TypeReg
			if hdr.Size < 0 || hdr.Size > lim.MaxBytes-st.Bytes {
				return st, fmt.Errorf("%w: %w: %s of %d bytes takes the files past %d bytes", ErrRefused, ErrTooLarge, field.Quote(name), hdr.Size, lim.MaxBytes)
			}
			st.Bytes += hdr.Size
			if err := writeFile(root, name, perm, hdr.ModTime, tr, hdr.Size); err != nil {
				return st, err
			}
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o700); err != nil {
				return st, fmt.Errorf("%s: %w", field.Quote(name), err)
			}
			// Modes last: a directory without write permission must
			// still take its files.
			dirs = append(dirs, dirMode{name, perm, hdr.ModTime})
		case tar.TypeSymlink:
			if err := mkParent(root, name); err != nil {
				return st, err
			}
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return st, fmt.Errorf("%s: %w", field.Quote(name), err)
			}
			links = append(links, name)
		}
	}
	checked = true
	if err := removeLinksOut(root, links); err != nil {
		return st, err
	}
	return st, setDirModes(root, dirs)
}

// removeLinksOut removes each of links that leads out of root, and
// returns an error for the first.
func removeLinksOut(root *os.Root, links []string) error {
	var first error
	for _, l := range links {
		out, err := leadsOut(rootLinks{root}, l)
		if err == nil && !out {
			continue
		}
		_ = root.Remove(l)
		if err == nil {
			err = refuse(l, "%s", whyLinkOut)
		}
		first = cmp.Or(first, err)
	}
	return first
}

// dirMode is a directory's mode and time, set once its files are in.
type dirMode struct {
	name  string
	mode  fs.FileMode
	mtime time.Time
}

// setDirModes sets the directories' modes and times, deepest first, so
// that a directory without write permission still took its files.
func setDirModes(root *os.Root, dirs []dirMode) error {
	for _, d := range slices.Backward(dirs) {
		if err := chmodDir(root, d.name, d.mode); err != nil {
			return fmt.Errorf("%s: %w", field.Quote(d.name), err)
		}
		if !d.mtime.IsZero() {
			_ = root.Chtimes(d.name, d.mtime, d.mtime)
		}
	}
	return nil
}

// chmodDir sets a directory's mode through a descriptor of it (fchmod):
// os.Root.Chmod takes fchmodat2, or /proc/self/fd where the kernel has
// none, and gVisor refuses both (EPERM), which failed the restore of every
// workspace with a directory under runsc. The directory is still 0700 (or
// its children's modes are all that was set so far), so it opens.
func chmodDir(root *os.Root, name string, mode fs.FileMode) error {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	err = f.Chmod(mode)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func mkParent(root *os.Root, name string) error {
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("%s: %w", field.Quote(name), err)
		}
	}
	return nil
}

func writeFile(root *os.Root, name string, perm fs.FileMode, mtime time.Time, r io.Reader, size int64) error {
	if err := mkParent(root, name); err != nil {
		return err
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("%s: %w", field.Quote(name), err)
	}
	_, err = io.CopyN(f, r, size)
	if err == nil {
		err = f.Chmod(perm) // exactly, whatever the umask
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", field.Quote(name), err)
	}
	if !mtime.IsZero() {
		_ = root.Chtimes(name, mtime, mtime)
	}
	return nil
}
