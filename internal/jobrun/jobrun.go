// Package jobrun holds what a worker hands its executor with each run
// beyond the job itself (Options), and what a session's sandbox is
// restored from (Snapshot): types the worker, the executor and the
// session host share, apart from any of them so that the executor does
// not import the worker.
package jobrun

import (
	"io"

	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// Options are what one run of a job needs beyond the job itself: the
// worker gives them to its executor with each job.
type Options struct {
	// OnOutput, if set, is told each piece of the job's stdout and stderr
	// as the sandbox writes it, in order, before the result. It is called
	// from the goroutine reading the sandbox and must not block: a slow
	// consumer would hold up the job's output, and with it the job. p is
	// the reader's buffer, reused once OnOutput returns: copy what is kept.
	OnOutput func(s jobs.Stream, p []byte)
	// OnStart, if set, is told once per run, before any OnOutput, that the
	// job is being handed to its sandbox: which one, and the limits it
	// runs under. Like OnOutput it must not block.
	OnStart func(Start)

	// Restore, if set, is restored into the working directory before the
	// job's files are written; they replace what it holds under their
	// names. A snapshot over the job's tmpfs size is rejected.
	Restore *Snapshot
	// Archive, if set, asks for an archive of the working directory once
	// the job ended; Run fills in what it learnt of it.
	Archive *ArchiveRequest
}

// Workspace I/O of one run (see Options.Restore and Options.Archive).
// The executor hands both to the sandbox's launcher, which restores and
// archives inside the sandbox; neither is ever unpacked on the worker's
// host.

// Snapshot is a workspace's snapshot to restore before the job: a tar
// archive as a launcher wrote it.
type Snapshot struct {
	R      io.Reader // its Size bytes; read once per Run
	Size   int64
	SHA256 string // hex; the launcher checks it before the job runs
}

// ArchiveRequest asks for an archive of the working directory after the
// job, and is where the executor reports on it.
type ArchiveRequest struct {
	// All archives the whole working directory (a workspace's next
	// snapshot); otherwise only the regular files matching Outputs.
	All     bool
	Outputs []string
	// W receives the archive's bytes as they arrive. It is written from
	// the goroutine reading the sandbox, after the job's process ended.
	W io.Writer

	// Set by Run.
	Bytes   int64  // what W was given
	SHA256  string // of what W was given, hex
	Files   int    // entries, as the launcher counted them
	Skipped int    // entries the launcher left out (fifos, links leading out, ...)
	// Skips lists the first of them with the reason, as many as the
	// launcher's report holds.
	Skips []jobs.SkippedEntry
	// Complete reports that the launcher's signed trailer covers exactly
	// what W was given and the archive is whole: only then may it be used.
	Complete bool
	// Err says why it is not complete: the launcher's reason (over a
	// limit), the job killed before it was written, W failing.
	Err string
}

// Start is what Options.OnStart is told.
type Start struct {
	Container string        // the sandbox's name (a short container ID)
	Limits    limits.Limits // the job's limits, resolved: every field set
}
