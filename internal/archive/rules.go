package archive

import (
	"archive/tar"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/sandfleet/sandfleet/internal/field"
)

// The rules of what an archive may hold, in one place: Extract refuses an
// entry that breaks one and names it; Write asks the same of every entry it
// would write and leaves out one that breaks any, with the same reason. So
// a tree can never be saved in a form its restore refuses.

// A rule is one check Extract makes of each entry, by itself.
type rule struct {
	name string
	// why says how the entry, under its name as extracted (a
	// directory's without its trailing slash), breaks the rule; "" when it
	// does not.
	why func(name string, hdr *tar.Header) string
}

// rules are the checks of each entry, in the order Extract makes them.
// Beside them, the archive as a whole: a name given once (Write walks a
// tree), the Limits (Write fails past them), and where each link leads once
// all are made (leadsOut, which Write runs on the links it keeps).
var rules = []rule{
	{"name", func(name string, _ *tar.Header) string { return nameRule(name) }},
	{"mode", func(_ string, hdr *tar.Header) string {
		if hdr.Mode&0o7000 != 0 {
			return fmt.Sprintf("mode %o has a setuid, setgid or sticky bit", hdr.Mode)
		}
		return ""
	}},
	{"sparse", func(_ string, hdr *tar.Header) string {
		for k := range hdr.PAXRecords {
			if strings.HasPrefix(k, "GNU.sparse.") {
				return "a sparse file"
			}
		}
		return ""
	}},
	{"type", func(_ string, hdr *tar.Header) string {
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink: // the reader turns the old TypeRegA into TypeReg
			return ""
		}
		return fmt.Sprintf("entries of type %q (a hard link, device, fifo or sparse file) are not kept in a workspace", hdr.Typeflag)
	}},
	{"link target", func(name string, hdr *tar.Header) string {
		if hdr.Typeflag != tar.TypeSymlink {
			return ""
		}
		return linkTarget(name, hdr.Linkname)
	}},
}

// check returns the first rule hdr breaks and how, or "" for none.
func check(name string, hdr *tar.Header) (rule, why string) {
	for _, r := range rules {
		if w := r.why(name, hdr); w != "" {
			return r.name, w
		}
	}
	return "", ""
}

// nameRule is field.FileName's, the rule of a job's own files: both end
// up in the same working directory.
func nameRule(name string) string {
	var fe *field.Error
	if err := field.FileName(name); errors.As(err, &fe) {
		if len(name) > field.MaxFileName {
			return fmt.Sprintf("the path is %d bytes: %s", len(name), fe.Reason)
		}
		return fe.Reason
	} else if err != nil {
		return err.Error()
	}
	return ""
}

// linkTarget checks a link's target as written: relative, and inside the
// tree when read as a path from the link's directory.
func linkTarget(name, target string) string {
	switch {
	case target == "" || strings.IndexByte(target, 0) >= 0:
		return "a link needs a target without NUL"
	case path.IsAbs(target):
		return fmt.Sprintf("the link's target %s is absolute", field.Quote(target))
	}
	if p := path.Join(path.Dir(name), target); p == ".." || strings.HasPrefix(p, "../") {
		return fmt.Sprintf("the link's target %s leads out of the workspace", field.Quote(target))
	}
	return ""
}

// Reasons of the checks beyond the rules, for a link, and for what Write
// cannot archive at all.
const (
	whyLinkOut    = "the link leads out of the workspace"
	whyUnreadable = "cannot be read"
)

func whyHops() string { return fmt.Sprintf("more than %d links to follow", maxLinkHops) }

// whyType says why Write leaves out a file of type t.
func whyType(t fs.FileMode) string {
	switch {
	case t&fs.ModeNamedPipe != 0:
		return "a fifo is not kept in a workspace"
	case t&fs.ModeSocket != 0:
		return "a socket is not kept in a workspace"
	case t&fs.ModeDevice != 0:
		return "a device is not kept in a workspace"
	}
	return fmt.Sprintf("a file of type %s is not kept in a workspace", t)
}

// links answers what leadsOut asks of a path in a tree: whether it is a
// link, and its target.
type links interface {
	link(p string) (target string, ok bool, err error)
}

// rootLinks are the links of a tree on disk.
type rootLinks struct{ root *os.Root }

func (r rootLinks) link(p string) (string, bool, error) {
	fi, err := r.root.Lstat(p)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return "", false, nil
	}
	target, err := r.root.Readlink(p)
	if err != nil {
		return "", false, fmt.Errorf("%s: %w", field.Quote(p), err)
	}
	return target, true, nil
}

// linkSet are the links an archive being written holds, by name: what the
// tree extracted from it will hold, which is what its links resolve in.
type linkSet map[string]string

func (s linkSet) link(p string) (string, bool, error) {
	t, ok := s[p]
	return t, ok, nil
}

// leadsOut resolves the link at name as the kernel would, following every
// link on the way, and reports whether the resolution leaves the tree: a
// target that looks inside can still lead out through another link
// ("d/l" -> "..", "m" -> "d/l/.."). A part that does not exist is taken as
// a directory, as the job could create it later. Past maxLinkHops it
// returns an error wrapping ErrRefused.
func leadsOut(t links, name string) (bool, error) {
	var at []string                  // the resolved directories, from the root down
	todo := strings.Split(name, "/") // what is left to resolve
	hops := 0
	for len(todo) > 0 {
		part := todo[0]
		todo = todo[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			if len(at) == 0 {
				return true, nil
			}
			at = at[:len(at)-1]
			continue
		}
		p := path.Join(append(slices.Clone(at), part)...)
		target, ok, err := t.link(p)
		if err != nil {
			return false, err
		}
		if !ok {
			at = append(at, part)
			continue
		}
		if hops++; hops > maxLinkHops {
			return false, refuse(name, "%s", whyHops())
		}
		if path.IsAbs(target) {
			return true, nil
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return false, nil
}
