package worker

import (
	"archive/tar"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/archive"
	"github.com/sandfleet/sandfleet/internal/field"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// A job's artifacts: the files of its archive that match its outputs, put
// into ARTIFACTS after the run (wscommit.go's afterRun).

// maxSkippedListed bounds the skipped artifacts a result lists; the rest
// are counted in ArtifactsError.
const maxSkippedListed = 100

// storeArtifacts puts the regular files of the archive that match the
// job's outputs into ARTIFACTS, within the worker's caps, and lists in the
// result what was kept and what was not.
func (s *wsStep) storeArtifacts(ctx context.Context, res *jobs.Result, ran bool) {
	switch {
	case s.req == nil || !ran:
		res.ArtifactsError = fmt.Sprintf("no artifacts: the job ended as %s (files come back from a job that ends on its own)", res.Status)
		return
	case !s.req.Complete:
		res.ArtifactsError = "no artifacts: " + s.req.Err
		return
	}
	store := s.objs.Artifacts
	run := jobs.NewID() // this delivery's: see ArtifactKey
	tr := tar.NewReader(s.arch.Reader(s.req.Bytes))
	var total int64
	more := 0
	full := "" // why the store takes no more: the tenant's quota
	skip := func(name string, size int64, reason string) {
		if len(res.ArtifactsSkipped) < maxSkippedListed {
			res.ArtifactsSkipped = append(res.ArtifactsSkipped, jobs.SkippedArtifact{Name: name, Size: size, Reason: reason})
		} else {
			more++
		}
	}
	// What the launcher left out of the archive (a path the restore would
	// refuse, a fifo) is no artifact either, and is listed as one skipped.
	for _, e := range s.req.Skips {
		if archive.MatchAny(s.job.Outputs, e.Name) {
			skip(e.Name, 0, e.Reason)
		}
	}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			res.ArtifactsError = "reading the archive: " + err.Error()
			return
		}
		if hdr.Typeflag != tar.TypeReg || !archive.MatchAny(s.job.Outputs, hdr.Name) {
			continue
		}
		if why := cmp.Or(full, s.refusal(hdr, len(res.Artifacts), total)); why != "" {
			skip(hdr.Name, hdr.Size, why)
			continue
		}
		key := fleet.ArtifactKey(s.job.ID, run, hdr.Name)
		sum := sha256.New()
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		_, err = store.Put(pctx, jetstream.ObjectMeta{Name: key}, io.TeeReader(tr, sum))
		cancel()
		if fleet.StoreFull(err) {
			full = s.artifactsFull()
			skip(hdr.Name, hdr.Size, full)
			continue
		}
		if err != nil {
			skip(hdr.Name, hdr.Size, "storing it failed: "+err.Error())
			continue
		}
		total += hdr.Size
		res.Artifacts = append(res.Artifacts, jobs.Artifact{Name: hdr.Name, Size: hdr.Size, SHA256: hex.EncodeToString(sum.Sum(nil)), Key: key})
	}
	if more > 0 {
		res.ArtifactsError = fmt.Sprintf("%d more files matching the outputs were skipped (past the %d listed)", more, maxSkippedListed)
	}
	if full != "" {
		res.ArtifactsError = full
		overQuota(res, full)
	}
}

// refusal is why a file that matches the outputs is not kept, told before
// it is read: a name no file may have, or the worker's caps, given the
// kept files so far and their bytes; "" when it may be kept.
func (s *wsStep) refusal(hdr *tar.Header, kept int, total int64) string {
	switch {
	case field.FileName(hdr.Name) != nil:
		return "not a name a file can have here"
	case kept >= s.w.cfg.MaxArtifacts:
		return fmt.Sprintf("over the limit of %d artifacts", s.w.cfg.MaxArtifacts)
	case total+hdr.Size > s.w.cfg.MaxArtifactBytes:
		return fmt.Sprintf("over the limit of %s of artifacts", limits.Size(s.w.cfg.MaxArtifactBytes))
	}
	return ""
}

// artifactsFull says why the job's tenant's artifacts store takes no more.
func (s *wsStep) artifactsFull() string {
	return fmt.Sprintf("%s: the artifacts of %s (object store %s) are at their quota of %s: they expire with their results (after %s)",
		fleet.QuotaReason, tenantName(s.tenant), fleet.ArtifactsBucketOf(s.tenant), limits.Size(s.w.cfg.Topology.ArtifactsMaxBytes), s.w.cfg.Topology.ResultTTL)
}

// dropArtifacts deletes the artifacts of a run whose result lost the store
// to another's (another live delivery's, a cancel's): they are under this
// run's keys (ArtifactKey), which no stored result names.
func (w *Worker) dropArtifacts(m *message, arts []jobs.Artifact, log *slog.Logger) {
	if m.job == nil || len(arts) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	objs, err := w.tenantObjects(ctx, m.tenant)
	if err != nil {
		log.Warn("remove the artifacts of a result not stored", "err", err)
		return
	}
	for _, a := range arts {
		if err := objs.Artifacts.Delete(ctx, a.Key); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			log.Warn("remove an artifact of a result not stored", "key", a.Key, "err", err)
		}
	}
}
