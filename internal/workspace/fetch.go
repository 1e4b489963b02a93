package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

var (
	// ErrNoWorkspace: a start names a workspace that has no head.
	ErrNoWorkspace = errors.New("no workspace")
	// ErrNotKept: a start names a revision its workspace no longer keeps.
	ErrNotKept = errors.New("revision not kept")
	// ErrGone: the snapshot of a revision the head keeps is gone
	// (expired, or removed with its workspace meanwhile).
	ErrGone = errors.New("snapshot gone")
)

// Resolve returns the revision a start from revision rev (0: the
// latest) of head h means, for a caller of owner (Allows). Revision 0
// back is an empty start: the workspace has no revision yet.
func Resolve(name string, h *jobs.WorkspaceHead, rev int64, owner string) (int64, error) {
	if h == nil {
		return 0, fmt.Errorf("%w %s", ErrNoWorkspace, name)
	}
	if err := Allows(name, h, owner); err != nil {
		return 0, err
	}
	switch {
	case rev == 0:
		return h.Revision, nil
	case rev != h.Revision && !slices.Contains(h.Kept, rev):
		return 0, reason{ErrNotKept, fmt.Sprintf("%s does not keep revision %d (it keeps %v)", name, rev, h.Kept)}
	}
	return rev, nil
}

// Getter is what a fetch needs of a tenant's SNAPSHOTS (a
// jetstream.ObjectStore).
type Getter interface {
	Get(ctx context.Context, name string, opts ...jetstream.GetObjectOpt) (jetstream.ObjectResult, error)
}

// Fetched is a snapshot in a spool, with its size and digest: the
// launcher checks the digest as it restores, so that a snapshot that
// changed on its way is never unpacked.
type Fetched struct {
	Spool  *Spool
	Size   int64
	SHA256 string
}

// Reader reads the snapshot from its start, however often it is called.
func (f *Fetched) Reader() io.Reader { return f.Spool.Reader(f.Size) }

// Close removes the spool's file, if it has one.
func (f *Fetched) Close() {
	if f != nil {
		f.Spool.Close()
	}
}

// Fetch copies the snapshot object of snaps to a spool in dir, and
// takes its digest on the way. A missing object is ErrGone.
func Fetch(ctx context.Context, snaps Getter, object, dir string) (*Fetched, error) {
	obj, err := snaps.Get(ctx, object)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrGone, object)
	}
	if err != nil {
		return nil, fmt.Errorf("get the snapshot %s: %w", object, err)
	}
	defer obj.Close()
	f := &Fetched{Spool: &Spool{Dir: dir}}
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(f.Spool, sum), obj)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("get the snapshot %s: %w", object, err)
	}
	f.Size, f.SHA256 = n, hex.EncodeToString(sum.Sum(nil))
	return f, nil
}

// Held returns a Fetched of data already held (the worker's cache), its
// digest known.
func Held(data []byte, sha string, dir string) (*Fetched, error) {
	f := &Fetched{Spool: &Spool{Dir: dir}, Size: int64(len(data)), SHA256: sha}
	if _, err := f.Spool.Write(data); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// reason is a sentinel error said in words of its own.
type reason struct {
	err error
	msg string
}

func (r reason) Error() string { return r.msg }
func (r reason) Unwrap() error { return r.err }
