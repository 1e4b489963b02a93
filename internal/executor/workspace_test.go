package executor

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// The archive counts as the launcher's only when the signed trailer covers
// its exact size and digest; an archive that does not check voids the
// verdict, as output bytes that do not would.
func TestVerdictArchive(t *testing.T) {
	t.Parallel()
	seal := envelope.NewSeal()
	lim := limits.Default()
	tar := bytes.Repeat([]byte("t"), 3000)
	got := func(p []byte) *archiveSink {
		s := newArchiveSink(&bytes.Buffer{}, 1<<20)
		s.add(p)
		return s
	}
	obs := func(tr envelope.Trailer, came []byte, killed jobs.Status) observed {
		s := got(came)
		return observed{trailer: seal.Sign(tr), archiveN: s.n, archiveSHA: s.digest(), killed: killed}
	}
	good := envelope.Trailer{ArchiveBytes: 3000, ArchiveSHA256: got(tar).digest(), ArchiveFiles: 7, ArchiveSkipped: 1}
	cases := []struct {
		name         string
		obs          observed
		status       jobs.Status
		archiveValid bool
	}{
		{"checks", obs(good, tar, ""), jobs.StatusSucceeded, true},
		{"one byte less came", obs(good, tar[1:], ""), jobs.StatusFailed, false},
		{"other bytes came", obs(good, append(bytes.Clone(tar[1:]), 'x'), ""), jobs.StatusFailed, false},
		{"no archive announced, one came", obs(envelope.Trailer{}, tar, ""), jobs.StatusFailed, false},
		{"none asked, none came", obs(envelope.Trailer{}, nil, ""), jobs.StatusSucceeded, true},
		{"killed at the timeout", obs(good, tar, jobs.StatusTimeout), jobs.StatusTimeout, false},
	}
	for _, tc := range cases {
		out := verdict(tc.obs, seal, lim)
		if out.status != tc.status || out.archive.signed != tc.archiveValid {
			t.Errorf("%s: status %s, archive %+v; want %s, signed %v", tc.name, out.status, out.archive, tc.status, tc.archiveValid)
		}
	}
	if out := verdict(obs(good, tar, ""), seal, lim); out.archive.files != 7 || out.archive.skipped != 1 {
		t.Errorf("archive %+v, want 7 files, 1 skipped", out.archive)
	}
}

func TestReportArchive(t *testing.T) {
	t.Parallel()
	var w bytes.Buffer
	sink := newArchiveSink(&w, 10)
	sink.add([]byte("0123456789"))
	req := &jobrun.ArchiveRequest{}
	reportArchive(req, sink, &outcome{archive: archiveVerdict{signed: true, files: 2}})
	if !req.Complete || req.Bytes != 10 || req.Files != 2 || w.String() != "0123456789" {
		t.Fatalf("report %+v, wrote %q", req, w.String())
	}
	sink.add([]byte("x")) // past its max
	req = &jobrun.ArchiveRequest{}
	reportArchive(req, sink, &outcome{archive: archiveVerdict{signed: true}})
	if req.Complete || !strings.Contains(req.Err, "more than") {
		t.Fatalf("over max: %+v", req)
	}
	req, sink = &jobrun.ArchiveRequest{}, newArchiveSink(&w, 10)
	reportArchive(req, sink, &outcome{archive: archiveVerdict{signed: true, err: "archive over its limit: more than 5 entries"}})
	if req.Complete || !strings.Contains(req.Err, "5 entries") {
		t.Fatalf("launcher's error: %+v", req)
	}
}

func TestWorkspaceHeaderLimits(t *testing.T) {
	t.Parallel()
	lim := limits.Default()
	_, _, err := workspaceHeader(jobrun.Options{Restore: &jobrun.Snapshot{Size: int64(lim.Tmpfs) + 1, SHA256: strings.Repeat("0", 64)}}, lim)
	if err == nil || !strings.Contains(err.Error(), "limits.tmpfs") {
		t.Fatalf("snapshot over the tmpfs: %v", err)
	}
	_, _, err = workspaceHeader(jobrun.Options{Archive: &jobrun.ArchiveRequest{Outputs: []string{"../x"}}}, lim)
	if err == nil || !strings.Contains(err.Error(), "outputs[0]") {
		t.Fatalf("bad glob: %v", err)
	}
}
