package envelope

import (
	"fmt"

	"github.com/sandfleet/sandfleet/internal/field"
)

// Restore announces a workspace's snapshot: right after the header, before
// the job's stdin, come Bytes bytes of a tar archive (see internal/archive)
// whose SHA-256 is SHA256. The launcher unpacks it into the working
// directory before it writes the job's files, which replace what the
// snapshot held under their names, and refuses it, without running the
// job, past MaxBytes or MaxFiles or for anything a launcher never writes.
type Restore struct {
	Bytes    int64  `json:"bytes"`
	SHA256   string `json:"sha256"`    // 64 lowercase hex digits
	MaxBytes int64  `json:"max_bytes"` // the working directory's tmpfs size
	MaxFiles int    `json:"max_files"`
}

// Archive asks the launcher to archive the working directory once the job
// has ended and every process it left is gone: all of it when All (a
// workspace's next snapshot), else the regular files matching Outputs. The
// archive goes out as FrameArchive frames; the trailer gives its size,
// digest and entry count. Past MaxBytes or MaxFiles it stops, and the
// trailer says why (ArchiveError).
type Archive struct {
	All      bool     `json:"all,omitempty"`
	Outputs  []string `json:"outputs,omitempty"` // globs, see field.Outputs
	MaxBytes int64    `json:"max_bytes"`
	MaxFiles int      `json:"max_files"`
}

func (h *Header) validateWorkspace() error {
	if r := h.Restore; r != nil {
		switch {
		case r.MaxBytes <= 0 || r.MaxFiles <= 0:
			return errorf("restore: max_bytes and max_files must be positive")
		case r.Bytes < 0 || r.Bytes > r.MaxBytes:
			return errorf("restore: %d bytes, over the limit of %d", r.Bytes, r.MaxBytes)
		case !keyRE.MatchString(r.SHA256):
			return errorf("restore: sha256 must be 64 lowercase hex digits")
		}
	}
	if a := h.Archive; a != nil {
		switch {
		case a.MaxBytes <= 0 || a.MaxFiles <= 0:
			return errorf("archive: max_bytes and max_files must be positive")
		case !a.All && len(a.Outputs) == 0:
			return errorf("archive: neither all nor outputs: nothing to archive")
		}
		if err := field.Outputs(a.Outputs); err != nil {
			return fmt.Errorf("%w: %w", ErrFormat, err)
		}
	}
	return nil
}
