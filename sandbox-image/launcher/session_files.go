package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// resolve confines a path to the sandbox's writable tree: the working
// directory (relative paths are in it) and /tmp. The agent runs as the
// session's own user, so this gives no more than a command could do; it
// is there to make a wrong path a clear error.
func (a *agent) resolve(p string) (string, error) {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return "", errors.New("path: empty, or has a NUL byte")
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(a.dir, p)
	}
	p = filepath.Clean(p)
	for _, root := range []string{a.dir, "/tmp"} {
		if p == root || strings.HasPrefix(p, root+"/") {
			return p, nil
		}
	}
	return "", fmt.Errorf("path %q: outside the session's files (%s and /tmp)", p, a.dir)
}

func entryOf(path string, fi fs.FileInfo) sessionapi.Entry {
	e := sessionapi.Entry{Name: fi.Name(), Path: path, Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), MTimeMS: fi.ModTime().UnixMilli()}
	switch {
	case fi.Mode().IsRegular():
		e.Type = "file"
	case fi.IsDir():
		e.Type, e.Size = "dir", 0
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = "symlink"
		e.Target, _ = os.Readlink(path)
	default:
		e.Type = "other"
	}
	return e
}

// errNotRegular: a read or write names what is not a regular file.
var errNotRegular = errors.New("not a regular file")

// openRegular opens a regular file, the only kind a read or write serves.
// O_NONBLOCK: the open of a FIFO the session's code made (or a symlink to
// one) returns at once instead of waiting for its other end, which would
// hold the call, and one of the agent's requests, for ever.
func openRegular(path string, flags int, mode fs.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flags|syscall.O_NONBLOCK, mode)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	switch {
	case err != nil:
	case fi.IsDir():
		err = fmt.Errorf("%s is a directory: %w", path, errNotRegular)
	case !fi.Mode().IsRegular():
		err = fmt.Errorf("%s: %w", path, errNotRegular)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// fileError is the session's error for a file call's err.
func fileError(err error) *sessionapi.Error {
	if e := sessionapi.AsError(err); e != nil {
		return e
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return sessionapi.Errorf(sessionapi.ErrNotFound, "%v", err)
	case errors.Is(err, fs.ErrExist):
		return sessionapi.Errorf(sessionapi.ErrExists, "%v", err)
	case errors.Is(err, errNotRegular), errors.Is(err, syscall.ENXIO):
		return sessionapi.Errorf(sessionapi.ErrInvalid, "%v", err)
	}
	return sessionapi.Errorf(sessionapi.ErrFailed, "%v", err)
}

// file serves a request on the session's files, each op by a function of
// its own; the path is confined first.
func (a *agent) file(id uint64, op string, req *sessionapi.FileRequest) *envelope.Reply {
	path, err := a.resolve(req.Path)
	if err != nil {
		return fail(id, sessionapi.ErrInvalid, "%v", err)
	}
	r := &sessionapi.FileResult{}
	switch op {
	case sessionapi.OpRead:
		err = readFile(req, path, r)
	case sessionapi.OpWrite:
		err = writeFile(req, path, r)
	case sessionapi.OpList:
		err = listDir(path, r)
	case sessionapi.OpStat:
		err = statFile(path, r)
	case sessionapi.OpRemove:
		err = a.remove(req, path)
	case sessionapi.OpMkdir:
		err = os.MkdirAll(path, 0o755)
	case sessionapi.OpRename:
		err = a.rename(req, path)
	}
	if err != nil {
		return &envelope.Reply{ID: id, Error: fileError(err)}
	}
	return done(id, r)
}

func readFile(req *sessionapi.FileRequest, path string, r *sessionapi.FileResult) error {
	f, err := openRegular(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	n := req.Length
	if n <= 0 || n > maxReadChunk {
		n = maxReadChunk
	}
	buf := make([]byte, n)
	got, err := f.ReadAt(buf, req.Offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	r.Data, r.EOF = buf[:got], errors.Is(err, io.EOF)
	return nil
}

func writeFile(req *sessionapi.FileRequest, path string, r *sessionapi.FileResult) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	flags := os.O_WRONLY | os.O_CREATE
	if req.Append {
		flags |= os.O_APPEND
	} else {
		flags |= os.O_TRUNC
	}
	mode := fs.FileMode(req.Mode & 0o777)
	if mode == 0 {
		mode = 0o644
	}
	f, err := openRegular(path, flags, mode)
	if err != nil {
		return err
	}
	_, werr := f.Write(req.Data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return werr
	}
	return statFile(path, r)
}

func listDir(path string, r *sessionapi.FileResult) error {
	// O_DIRECTORY: a FIFO named here fails at once, as os.ReadDir's
	// plain open would wait for its writer.
	d, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	ents, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return err
	}
	slices.SortFunc(ents, func(x, y fs.DirEntry) int { return strings.Compare(x.Name(), y.Name()) })
	r.Entries = []sessionapi.Entry{}
	for _, d := range ents[:min(len(ents), maxEntries)] {
		if fi, err := d.Info(); err == nil {
			r.Entries = append(r.Entries, entryOf(filepath.Join(path, d.Name()), fi))
		}
	}
	return nil
}

func statFile(path string, r *sessionapi.FileResult) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	e := entryOf(path, fi)
	r.Entry = &e
	return nil
}

func (a *agent) remove(req *sessionapi.FileRequest, path string) error {
	if path == a.dir || path == "/tmp" {
		return sessionapi.Errorf(sessionapi.ErrInvalid, "%s cannot be removed", path)
	}
	if _, err := os.Lstat(path); err != nil {
		return err
	}
	rm := os.Remove
	if req.Recursive {
		rm = os.RemoveAll
	}
	if err := rm(path); err != nil {
		return err
	}
	return nil
}

func (a *agent) rename(req *sessionapi.FileRequest, path string) error {
	to, err := a.resolve(req.To)
	if err != nil {
		return sessionapi.Errorf(sessionapi.ErrInvalid, "to: %v", err)
	}
	if err := os.Rename(path, to); err != nil {
		return err
	}
	return nil
}
