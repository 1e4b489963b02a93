package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/sandfleet/sandfleet/internal/archive"
	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/field"
	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// A workspace's snapshot and a job's artifacts travel through the sandbox's
// launcher: the snapshot to restore follows the envelope's header on the
// container's stdin, and the archive made after the job comes back as
// FrameArchive frames, its size and digest in the signed trailer. Nothing
// is unpacked here: the executor only copies bytes and checks them.

// workspaceHeader returns the Restore and Archive of a job's header, or an
// error naming the field that does not fit its limits (the job is then
// rejected).
func workspaceHeader(opts jobrun.Options, lim limits.Limits) (*envelope.Restore, *envelope.Archive, error) {
	var r *envelope.Restore
	var a *envelope.Archive
	if s := opts.Restore; s != nil {
		if s.Size > int64(lim.Tmpfs) {
			return nil, nil, &field.Error{Field: "limits.tmpfs", Reason: fmt.Sprintf(
				"the workspace's snapshot is %s, over the working directory's tmpfs of %s: ask for more", limits.Size(s.Size), lim.Tmpfs)}
		}
		r = &envelope.Restore{Bytes: s.Size, SHA256: s.SHA256, MaxBytes: int64(lim.Tmpfs), MaxFiles: archive.DefaultMaxFiles}
	}
	if ar := opts.Archive; ar != nil {
		if err := field.Outputs(ar.Outputs); err != nil {
			return nil, nil, err
		}
		a = &envelope.Archive{All: ar.All, Outputs: ar.Outputs, MaxBytes: int64(lim.Tmpfs), MaxFiles: archive.DefaultMaxFiles}
	}
	return r, a, nil
}

// archiveSink is where a sandbox's FrameArchive frames go: the caller's
// writer, up to the most a launcher may send, with their count and digest.
// It is used under the capture's lock.
type archiveSink struct {
	w   io.Writer
	max int64
	n   int64
	sum hash.Hash
	err error // W failed, or more came than max
}

func newArchiveSink(w io.Writer, max int64) *archiveSink {
	return &archiveSink{w: w, max: max, sum: sha256.New()}
}

func (a *archiveSink) add(p []byte) {
	a.n += int64(len(p))
	a.sum.Write(p)
	if a.err != nil {
		return
	}
	if a.n > a.max {
		a.err = fmt.Errorf("more than %d bytes of archive", a.max)
		return
	}
	if _, err := a.w.Write(p); err != nil {
		a.err = err
	}
}

// digest is the hex SHA-256 of what came, "" when nothing did: what a
// launcher that made no archive leaves out of its trailer.
func (a *archiveSink) digest() string {
	if a == nil || a.n == 0 {
		return ""
	}
	return hex.EncodeToString(a.sum.Sum(nil))
}

// errRestoreSource marks a failure to read the snapshot given to Run: the
// worker's, not the job's.
var errRestoreSource = errors.New("reading the snapshot to restore")

// reportArchive tells the caller what became of the archive it asked for.
func reportArchive(req *jobrun.ArchiveRequest, sink *archiveSink, out *outcome) {
	if req == nil {
		return
	}
	req.Bytes, req.SHA256 = sink.n, sink.digest()
	req.Files, req.Skipped, req.Skips = out.archive.files, out.archive.skipped, out.archive.skips
	switch {
	case !out.archive.signed:
		req.Err = "the sandbox gave no archive the executor could check (the job was killed, or its launcher gave no verdict)"
	case sink.err != nil:
		req.Err = "keeping the archive: " + sink.err.Error()
	case out.archive.err != "":
		req.Err = out.archive.err
	case sink.n == 0:
		req.Err = "the sandbox's launcher made no archive"
		if out.msg != "" {
			req.Err += ": " + out.msg
		}
	default:
		req.Complete = true
	}
}

// readerOnly passes reads on and records their error, so that a failure to
// read the snapshot is told apart from the container going away.
type readerOnly struct {
	r   io.Reader
	err *error
}

func (r readerOnly) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		*r.err = err
	}
	return n, err
}
