package gateway

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"path"
	"strconv"
	"time"

	"github.com/sandfleet/sandfleet/internal/shorten"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// ArtifactList is the answer of GET /v1/jobs/{id}/artifacts: what the
// job's result says it kept and skipped.
type ArtifactList struct {
	ID        string                 `json:"id"`
	Artifacts []jobs.Artifact        `json:"artifacts"`
	Skipped   []jobs.SkippedArtifact `json:"skipped"`
	Error     string                 `json:"error,omitempty"`
}

// finished returns the job's result; a job without one yet is answered
// 202 (done is then true), an unknown one 404.
func (g *Gateway) finished(w http.ResponseWriter, r *http.Request, tok *Token) (res *jobs.Result, done bool, err error) {
	id, err := g.pathJob(r, tok)
	if err != nil {
		return nil, false, err
	}
	client := g.views.of(tok).Client()
	res, err = client.Get(r.Context(), id)
	if errors.Is(err, jobs.ErrNotFound) {
		// Queued or running: the artifacts come with the result.
		return nil, true, g.lookup(w, r.Context(), client, id, nil)
	}
	return res, false, err
}

// artifacts: GET /v1/jobs/{id}/artifacts.
func (g *Gateway) artifacts(w http.ResponseWriter, r *http.Request, tok *Token) error {
	res, done, err := g.finished(w, r, tok)
	if done || err != nil {
		return err
	}
	list := ArtifactList{ID: res.ID, Artifacts: res.Artifacts, Skipped: res.ArtifactsSkipped, Error: res.ArtifactsError}
	if list.Artifacts == nil {
		list.Artifacts = []jobs.Artifact{}
	}
	if list.Skipped == nil {
		list.Skipped = []jobs.SkippedArtifact{}
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// artifact: GET /v1/jobs/{id}/artifacts/{name...}: the file's bytes,
// checked against the digest its result lists.
func (g *Gateway) artifact(w http.ResponseWriter, r *http.Request, tok *Token) error {
	res, done, err := g.finished(w, r, tok)
	if done || err != nil {
		return err
	}
	name := r.PathValue("name")
	for _, a := range res.Artifacts {
		if a.Name != name {
			continue
		}
		dw := g.download(w, "application/octet-stream", path.Base(a.Name), a.Size)
		dw.h.Set("X-Sandfleet-Sha256", a.SHA256)
		return dw.finish(g.views.of(tok).Client().WriteArtifact(r.Context(), a, dw))
	}
	return apiErr(http.StatusNotFound, CodeNotFound, "job %s has no artifact %q", res.ID, name)
}

// workspace: GET /v1/workspaces/{name}: its head.
func (g *Gateway) workspace(w http.ResponseWriter, r *http.Request, tok *Token) error {
	h, err := g.head(r, tok)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, h)
	return nil
}

// snapshot: GET /v1/workspaces/{name}/snapshot[?revision=N]: a revision's
// tar, as the sandbox's launcher wrote it.
func (g *Gateway) snapshot(w http.ResponseWriter, r *http.Request, tok *Token) error {
	h, err := g.head(r, tok)
	if err != nil {
		return err
	}
	ref := jobs.WorkspaceRef{Name: h.Name, Revision: h.Revision}
	if v := r.URL.Query().Get("revision"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return apiErr(http.StatusBadRequest, CodeInvalidRequest, "revision %q must be a number from 1", v)
		}
		ref.Revision = n
	}
	if ref.Revision == 0 {
		return apiErr(http.StatusNotFound, CodeNotFound, "workspace %s is empty: no revision saved yet", h.Name)
	}
	size := int64(-1)
	if ref.Revision == h.Revision {
		size = h.SizeBytes
	}
	dw := g.download(w, "application/x-tar", fmt.Sprintf("%s-%d.tar", h.Name, ref.Revision), size)
	dw.h.Set("X-Sandfleet-Revision", strconv.FormatInt(ref.Revision, 10))
	_, err = g.views.of(tok).Client().WriteSnapshot(r.Context(), ref, dw)
	return dw.finish(err)
}

// head reads the workspace the path names, as the token's scope names
// it; an unknown one, one outside the scope, or a fleet that keeps none,
// is 404.
func (g *Gateway) head(r *http.Request, tok *Token) (*jobs.WorkspaceHead, error) {
	v := g.views.of(tok)
	name, err := v.Workspace(r.PathValue("name"))
	if err != nil {
		return nil, apiErr(http.StatusNotFound, CodeNotFound, "no workspace %q (never made, removed, or expired)", shorten.Text(r.PathValue("name"), 140))
	}
	h, err := v.Client().Workspace(r.Context(), name)
	switch {
	case errors.Is(err, jobs.ErrInvalidJob):
		return nil, apiErr(http.StatusNotFound, CodeNotFound, "no workspace %q (names match [A-Za-z0-9_-]{1,128})", name)
	case errors.Is(err, jobs.ErrNoWorkspace), errors.Is(err, jobs.ErrNoWorkspaces):
		return nil, apiErr(http.StatusNotFound, CodeNotFound, "no workspace %q (never made, removed, or expired)", name)
	}
	return h, err
}

// downloadWriter sends a file: its headers go out with the first bytes,
// so an error found before them (an unknown revision) is still a JSON
// error; each write has a deadline of its own, as a stream's lines do. It
// holds back the file's last byte until finish: the digest is checked
// once every byte has been read, and a file that fails it must arrive
// short of its Content-Length, never whole-looking.
type downloadWriter struct {
	w       http.ResponseWriter
	h       http.Header
	rc      *http.ResponseController
	timeout time.Duration
	started bool
	held    [1]byte
	holding bool
}

func (g *Gateway) download(w http.ResponseWriter, ctype, filename string, size int64) *downloadWriter {
	h := http.Header{}
	h.Set("Content-Type", ctype)
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": filename}))
	h.Set("X-Content-Type-Options", "nosniff")
	if size >= 0 {
		h.Set("Content-Length", strconv.FormatInt(size, 10))
	}
	return &downloadWriter{w: w, h: h, rc: http.NewResponseController(w), timeout: g.cfg.WriteTimeout}
}

func (d *downloadWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if d.holding {
		if err := d.send(d.held[:]); err != nil {
			return 0, err
		}
	}
	if err := d.send(p[:len(p)-1]); err != nil {
		return 0, err
	}
	d.held[0], d.holding = p[len(p)-1], true
	return len(p), nil
}

func (d *downloadWriter) send(p []byte) error {
	if !d.started {
		d.started = true
		for k, v := range d.h {
			d.w.Header()[k] = v
		}
		d.w.WriteHeader(http.StatusOK)
	}
	_ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	_, err := d.w.Write(p)
	return err
}

// finish ends a download. An error before the first byte is the
// handler's to answer. After it, the answer is cut off rather than ended
// cleanly, so the client cannot take a short or corrupted file for the
// whole one.
func (d *downloadWriter) finish(err error) error {
	if err == nil {
		switch {
		case d.holding:
			err = d.send(d.held[:]) // the digest held: the last byte
		case !d.started:
			err = d.send(nil) // an empty file
		}
	}
	if err != nil && d.started {
		panic(http.ErrAbortHandler)
	}
	return err
}
