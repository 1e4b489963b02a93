package executor

// Workspaces in the real sandbox: a snapshot written by one job and
// restored for the next, the files a job returns, and the hostile
// snapshots a launcher refuses, each run for real against the engine.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/archive"
	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/internal/testutil/archivetest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// workspaceSetup is setup with the sandbox image SANDFLEET_TEST_IMAGE
// names, when set: a branch's own image, while other branches rebuild the
// shared tag with launchers that know no workspaces.
func workspaceSetup(t *testing.T) *Executor {
	t.Helper()
	img := os.Getenv("SANDFLEET_TEST_IMAGE")
	return setup(t, func(c *Config) {
		if img != "" {
			c.Presets = DefaultPresets()
			for n, p := range c.Presets {
				p.Image = img
				c.Presets[n] = p
			}
		}
	})
}

func shell(script string, mod ...func(*jobs.Job)) *jobs.Job {
	return job(script, append([]func(*jobs.Job){func(j *jobs.Job) { j.Image = "shell" }}, mod...)...)
}

func snapshotOf(b []byte) *jobrun.Snapshot {
	sum := sha256.Sum256(b)
	return &jobrun.Snapshot{R: bytes.NewReader(b), Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
}

func runWith(t testing.TB, e *Executor, j *jobs.Job, opts jobrun.Options) *jobs.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	res, err := e.Run(ctx, j, opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

// names lists an archive's entries.
func names(t testing.TB, b []byte) []string {
	t.Helper()
	var out []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("archive: %v", err)
		}
		out = append(out, h.Name)
	}
}

// One job leaves a workspace, with what a job may leave that a workspace
// does not keep; the next job finds it restored, its own files on top.
func TestIntegrationWorkspaceRoundTrip(t *testing.T) {
	t.Parallel()
	e := workspaceSetup(t)
	var snap bytes.Buffer
	req := &jobrun.ArchiveRequest{All: true, W: &snap}
	res := runWith(t, e, shell(`set -e
mkdir -p d/deep
printf 'line 1\n' > notes.txt
printf 'deep\n' > d/deep/f
ln -s d/deep/f inside
ln -s /etc/passwd abs
ln -s ../../etc d/out
mkfifo pipe
printf 'x' > suid && chmod 4755 suid
# A child that outlives the job and keeps writing: the launcher stops it
# before it archives, so the snapshot is whole.
(while :; do echo more >> grow.txt; done) &
sleep 0.2
echo done`), jobrun.Options{Archive: req})
	want(t, res, jobs.StatusSucceeded)
	if !req.Complete || req.Bytes != int64(snap.Len()) || req.Skipped != 3 {
		t.Fatalf("archive %+v (%d bytes came); want complete, 3 skipped (abs, d/out, pipe)", req, snap.Len())
	}
	var skipped []string
	for _, s := range req.Skips {
		skipped = append(skipped, s.Name+": "+s.Reason)
	}
	if want := []string{`abs: the link's target "/etc/passwd" is absolute`, `d/out: the link's target "../../etc" leads out of the workspace`,
		"pipe: a fifo is not kept in a workspace"}; !slices.Equal(skipped, want) {
		t.Errorf("skips %q, want %q", skipped, want)
	}
	got := names(t, snap.Bytes())
	for _, n := range []string{"notes.txt", "d/", "d/deep/f", "inside", "suid", "grow.txt", "main.sh"} {
		if !slices.Contains(got, n) {
			t.Errorf("%s missing from the snapshot %q", n, got)
		}
	}
	for _, n := range []string{"abs", "d/out", "pipe"} {
		if slices.Contains(got, n) {
			t.Errorf("%s in the snapshot", n)
		}
	}

	var next bytes.Buffer
	req2 := &jobrun.ArchiveRequest{All: true, W: &next}
	res = runWith(t, e, shell(`printf 'line 2\n' >> notes.txt
cat notes.txt; cat inside; cat d/deep/f
stat -c %a suid
cat replaced.txt`, func(j *jobs.Job) {
		j.Files = map[string]string{"replaced.txt": "from the job\n", "d/deep/f": "replaced\n"}
	}), jobrun.Options{Restore: snapshotOf(snap.Bytes()), Archive: req2})
	want(t, res, jobs.StatusSucceeded)
	if wantOut := "line 1\nline 2\nreplaced\nreplaced\n755\nfrom the job\n"; res.Stdout != wantOut {
		t.Fatalf("stdout %q, want %q (stderr %q)", res.Stdout, wantOut, res.Stderr)
	}
	if !req2.Complete {
		t.Fatalf("second archive: %+v", req2)
	}
}

// A job's outputs alone: only regular files matching the globs, never what
// a link or a fifo named like one would give.
func TestIntegrationOutputsOnly(t *testing.T) {
	t.Parallel()
	e := workspaceSetup(t)
	var out bytes.Buffer
	req := &jobrun.ArchiveRequest{Outputs: []string{"*.png", "results/**"}, W: &out}
	res := runWith(t, e, shell(`set -e
printf 'png' > plot.png
mkdir -p sub results/a
printf 'deep' > sub/deep.png
printf 'r' > results/a/r.csv
ln -s /etc/passwd passwd.png
mkfifo fifo.png
printf 'no' > notes.txt`), jobrun.Options{Archive: req})
	want(t, res, jobs.StatusSucceeded)
	if !req.Complete {
		t.Fatalf("archive %+v", req)
	}
	if got, wantNames := names(t, out.Bytes()), []string{"plot.png", "results/a/r.csv"}; !slices.Equal(got, wantNames) {
		t.Fatalf("archived %q, want %q", got, wantNames)
	}
}

// Each hostile snapshot is refused inside the sandbox before the job runs:
// the job is failed with the launcher's reason, and never ran.
func TestIntegrationHostileSnapshots(t *testing.T) {
	t.Parallel()
	e := workspaceSetup(t)
	lim := limits.Limits{Tmpfs: 64 * limits.MiB}
	cases := archivetest.Hostile(int64(lim.Tmpfs))
	cases = append(cases, archivetest.Case{Name: "a file past the limit, refused from its header", Tar: archivetest.Declared("big", int64(lim.Tmpfs)+1, 1024), TooLarge: true})
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			res := runWith(t, e, shell(`echo RAN; ls -la /tmp /workspace`, withLimits(lim)),
				jobrun.Options{Restore: snapshotOf(tc.Tar)})
			if int64(len(tc.Tar)) > int64(lim.Tmpfs) {
				// Announced over the limit: no sandbox is taken.
				want(t, res, jobs.StatusRejected)
				return
			}
			want(t, res, jobs.StatusFailed)
			wantExit(t, res, 125)
			if strings.Contains(res.Stdout, "RAN") {
				t.Fatalf("the job ran on a hostile snapshot: %q", res.Stdout)
			}
			if !strings.Contains(res.Error, "restoring the workspace") {
				t.Fatalf("error %q does not say the restore failed", res.Error)
			}
			t.Logf("%s: %s", tc.Name, res.Error)
		})
	}
}

// A million tiny files: refused past archive.DefaultMaxFiles, in the
// sandbox, while streaming; and a digest that does not match what was
// announced stops the job too.
func TestIntegrationSnapshotBombs(t *testing.T) {
	t.Parallel()
	e := workspaceSetup(t)
	lim := limits.Limits{Tmpfs: 128 * limits.MiB, Timeout: limits.Duration(90 * time.Second)}
	files := archivetest.TinyFiles(archive.DefaultMaxFiles + 1)
	res := runWith(t, e, shell(`echo RAN`, withLimits(lim)), jobrun.Options{Restore: snapshotOf(files)})
	want(t, res, jobs.StatusFailed)
	if strings.Contains(res.Stdout, "RAN") || !strings.Contains(res.Error, "more than 100000 entries") {
		t.Fatalf("too many files: stdout %q error %q", res.Stdout, res.Error)
	}

	good := archivetest.Tar(archivetest.Entry{Name: "f", Data: "x"})
	s := snapshotOf(good)
	s.SHA256 = strings.Repeat("0", 64)
	res = runWith(t, e, shell(`echo RAN`), jobrun.Options{Restore: s})
	want(t, res, jobs.StatusFailed)
	if strings.Contains(res.Stdout, "RAN") || !strings.Contains(res.Error, "sha256") {
		t.Fatalf("wrong digest: stdout %q error %q", res.Stdout, res.Error)
	}

	// Over the job's tmpfs: rejected before a sandbox is taken.
	big := snapshotOf(make([]byte, 2<<20))
	res = runWith(t, e, shell(`echo RAN`, withLimits(limits.Limits{Tmpfs: 1 * limits.MiB})), jobrun.Options{Restore: big})
	want(t, res, jobs.StatusRejected)
	if !strings.Contains(res.Error, "limits.tmpfs") {
		t.Fatalf("error %q", res.Error)
	}
}

// A workspace that outgrows what a snapshot may hold is not archived, and
// the run says why; the job's own verdict stands.
func TestIntegrationArchiveOverLimit(t *testing.T) {
	t.Parallel()
	e := workspaceSetup(t)
	var out bytes.Buffer
	req := &jobrun.ArchiveRequest{All: true, W: &out}
	// More entries than a snapshot may hold: 100,001 empty files.
	res := runWith(t, e, job(`
import os
for i in range(100001):
    open(f"f{i}", "w").close()
print("ok")`, withLimits(limits.Limits{Timeout: limits.Duration(90 * time.Second), Tmpfs: 256 * limits.MiB})),
		jobrun.Options{Archive: req})
	want(t, res, jobs.StatusSucceeded)
	if req.Complete || !strings.Contains(req.Err, "over its limit") {
		t.Fatalf("archive %+v", req)
	}
}

// A job that leaves the pids limit exhausted by background processes still
// gets its verdict and a whole snapshot: the launcher kills and reaps them
// before it archives, so it is never refused the thread it may need.
func TestIntegrationArchiveAfterPidsExhausted(t *testing.T) {
	t.Parallel()
	e := workspaceSetup(t)
	var out bytes.Buffer
	req := &jobrun.ArchiveRequest{All: true, W: &out}
	res := runWith(t, e, job(`
import subprocess
open("kept.txt", "w").write("kept\n")
n = 0
try:
    while n < 200:
        subprocess.Popen(["sleep", "60"])
        n += 1
except OSError:
    pass
print("spawned", n, "until the limit" if n < 200 else "")`, withLimits(limits.Limits{Pids: 32})), jobrun.Options{Archive: req})
	want(t, res, jobs.StatusSucceeded)
	if !strings.Contains(res.Stdout, "until the limit") {
		t.Fatalf("the pids limit was not reached: %q", res.Stdout)
	}
	if !req.Complete || !slices.Contains(names(t, out.Bytes()), "kept.txt") {
		t.Fatalf("archive %+v, entries %q", req, names(t, out.Bytes()))
	}
}
