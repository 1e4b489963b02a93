package jobs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/archive"
	"github.com/sandfleet/sandfleet/internal/field"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/shorten"
)

var (
	// ErrNoWorkspace: no workspace has this name (it was never made, was
	// removed, or expired).
	ErrNoWorkspace = errors.New("no such workspace")
	// ErrNoRevision: the workspace does not keep this revision.
	ErrNoRevision = errors.New("revision not kept")
	// ErrDigest: what was read does not have the digest it was stored with.
	ErrDigest = errors.New("digest mismatch")
)

// workspaceStores opens the workspace buckets on first use: a client that
// never touches a workspace works with a fleet that keeps none. Not for a
// tenant's client, which may not bind them (see heads and objectStore).
func (c *Client) workspaceStores(ctx context.Context) (*fleet.WorkspaceStores, error) {
	c.wsMu.Lock()
	defer c.wsMu.Unlock()
	if c.ws != nil {
		return c.ws, nil
	}
	ws, err := fleet.OpenWorkspaces(ctx, c.js)
	if err != nil {
		return nil, err
	}
	c.ws = ws
	return ws, nil
}

// objectStore returns an object store (snapshots or artifacts, of a
// tenant or of none) as the client's access reaches it.
func (c *Client) objectStore(ctx context.Context, bucket string) (jetstream.ObjectStore, error) {
	return c.acc.objectStore(ctx, bucket)
}

// bindObjectStore binds an object store of a tenant's (snapshots or
// artifacts) on first use: a tenant may read the info of its own. A
// bucket that does not exist yet is ErrNoWorkspaces.
func (c *Client) bindObjectStore(ctx context.Context, bucket string) (jetstream.ObjectStore, error) {
	c.wsMu.Lock()
	defer c.wsMu.Unlock()
	if o := c.objs[bucket]; o != nil {
		return o, nil
	}
	o, err := c.js.ObjectStore(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: no object store %s", ErrNoWorkspaces, bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", bucket, err)
	}
	if c.objs == nil {
		c.objs = map[string]jetstream.ObjectStore{}
	}
	c.objs[bucket] = o
	return o, nil
}

// DecodeWorkspaceHead parses a head as stored in WORKSPACES under key name.
func DecodeWorkspaceHead(name string, data []byte) (*WorkspaceHead, error) {
	var h WorkspaceHead
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, fmt.Errorf("workspace %s: %w", name, err)
	}
	if h.Name != name {
		return nil, fmt.Errorf("workspace %s: the head names %q", name, h.Name)
	}
	return &h, nil
}

// workspaceName checks and qualifies a workspace's name as the client's
// jobs name it (QualifyWorkspace).
func (c *Client) workspaceName(name string) (string, error) {
	q, err := c.QualifyWorkspace(name)
	if err != nil {
		return "", err
	}
	if err := checkWorkspaceName("workspace", q); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	return q, nil
}

// Workspace returns the head of a workspace, or ErrNoWorkspace. A tenant's
// client takes the name with or without its tenant (agent-7 is
// <tenant>.agent-7). A head with an owner (a persistent session's
// checkpoint) is its owner's alone: to a client, which acts for a whole
// tenant or fleet, it is ErrNoWorkspace, as one that does not exist, and
// so it is to every call that names a workspace (its snapshots, its
// removal, the list).
func (c *Client) Workspace(ctx context.Context, name string) (*WorkspaceHead, error) {
	name, err := c.workspaceName(name)
	if err != nil {
		return nil, err
	}
	h, err := c.acc.head(ctx, name)
	if err == nil && h.Owner != "" {
		return nil, fmt.Errorf("%w: %s", ErrNoWorkspace, name)
	}
	return h, err
}

// head reads WORKSPACES[name] from the bucket.
func (a *fleetAccess) head(ctx context.Context, name string) (*WorkspaceHead, error) {
	ws, err := a.c.workspaceStores(ctx)
	if err != nil {
		return nil, err
	}
	e, err := ws.Heads.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, fmt.Errorf("%w: %s", ErrNoWorkspace, name)
	}
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", name, err)
	}
	return DecodeWorkspaceHead(name, e.Value())
}

// Workspaces returns every workspace's head, by name; a tenant's client,
// the tenant's. The checkpoints of persistent sessions are not listed:
// they are their sessions' owners' alone (fleet.SessionWorkspace).
func (c *Client) Workspaces(ctx context.Context) ([]*WorkspaceHead, error) {
	return c.acc.heads(ctx)
}

// heads lists the heads from the bucket's stream.
func (a *fleetAccess) heads(ctx context.Context) ([]*WorkspaceHead, error) {
	c := a.c
	if _, err := c.workspaceStores(ctx); err != nil {
		return nil, err
	}
	// Which heads exist, from the stream's state: a KV key listing is a
	// watch, and a head moved while it starts (a step taking or releasing
	// it) can end its initial values early, leaving heads out.
	names, err := kvKeys(ctx, c.js, fleet.WorkspacesBucket)
	if err != nil {
		return nil, fmt.Errorf("list workspaces: %w", err)
	}
	var heads []*WorkspaceHead
	for _, n := range names {
		if fleet.IsSessionWorkspace(n) {
			continue
		}
		h, err := c.Workspace(ctx, n)
		if errors.Is(err, ErrNoWorkspace) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		heads = append(heads, h)
	}
	return heads, nil
}

// DeleteWorkspace removes a workspace: its head at once, then the
// snapshots it keeps. A step in flight fails to save. It returns how many
// snapshots could not be deleted (a fleet's submitter may not): they expire
// with the workspaces' TTL, and nothing refers to them any more.
func (c *Client) DeleteWorkspace(ctx context.Context, name string) (left int, err error) {
	h, err := c.Workspace(ctx, name)
	if err != nil {
		return 0, err
	}
	name = h.Name
	if err := c.acc.purgeHead(ctx, name); err != nil {
		return 0, fmt.Errorf("remove workspace %s: %w", name, err)
	}
	revs := h.Kept
	if h.Revision > 0 && !slices.Contains(revs, h.Revision) {
		revs = append(revs, h.Revision)
	}
	if len(revs) == 0 {
		return 0, nil
	}
	snaps, err := c.objectStore(ctx, fleet.SnapshotsBucketOf(TenantOf(name)))
	if err != nil {
		return len(revs), nil // they expire
	}
	for _, r := range revs {
		dctx, cancel := context.WithTimeout(ctx, c.cfg.CancelWait)
		err := snaps.Delete(dctx, h.Snapshot(r))
		cancel()
		if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			left++
		}
	}
	return left, nil
}

// purgeHead removes a workspace's head: a delete, which the bucket keeps
// one message of (its history is 1), as WORKSPACES refuses rollups, so a
// purge.
func (a *fleetAccess) purgeHead(ctx context.Context, name string) error {
	ws, err := a.c.workspaceStores(ctx)
	if err != nil {
		return err
	}
	return ws.Heads.Delete(ctx, name)
}

// resolve returns the revision ref names: its own, or the head's.
func (c *Client) resolve(ctx context.Context, ref WorkspaceRef) (*WorkspaceHead, int64, error) {
	h, err := c.Workspace(ctx, ref.Name)
	if err != nil {
		return nil, 0, err
	}
	rev := ref.Revision
	if rev == 0 {
		rev = h.Revision
	}
	if rev == 0 {
		return h, 0, fmt.Errorf("%w: workspace %s is empty (no revision saved yet)", ErrNoRevision, ref.Name)
	}
	if rev != h.Revision && !slices.Contains(h.Kept, rev) {
		return h, 0, fmt.Errorf("%w: %s@%d (it keeps %v)", ErrNoRevision, ref.Name, rev, h.Kept)
	}
	return h, rev, nil
}

// WriteSnapshot writes the snapshot of ref (a tar, as the launcher wrote
// it) to w and returns its revision.
func (c *Client) WriteSnapshot(ctx context.Context, ref WorkspaceRef, w io.Writer) (int64, error) {
	h, rev, err := c.resolve(ctx, ref)
	if err != nil {
		return 0, err
	}
	snaps, err := c.objectStore(ctx, fleet.SnapshotsBucketOf(TenantOf(h.Name)))
	if err != nil {
		return 0, err
	}
	want := ""
	if rev == h.Revision {
		want = h.SHA256
	}
	if err := getObject(ctx, snaps, h.Snapshot(rev), want, w); err != nil {
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return 0, fmt.Errorf("%w: %s@%d: its snapshot is gone (expired or removed)", ErrNoRevision, h.Name, rev)
		}
		return 0, err
	}
	return rev, nil
}

// ExtractWorkspace writes the files of ref's snapshot into dir, which must
// be empty or not exist, with the launcher's rules (internal/archive):
// nothing lands outside dir, and a snapshot holding what a launcher never
// writes is refused. It returns the revision and the entries written. On
// an error dir is left as it was: what was written is removed (and dir
// itself, when this call made it).
func (c *Client) ExtractWorkspace(ctx context.Context, ref WorkspaceRef, dir string) (rev int64, files int, err error) {
	_, statErr := os.Lstat(dir)
	made := errors.Is(statErr, fs.ErrNotExist)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, err
	}
	if des, err := os.ReadDir(dir); err != nil {
		return 0, 0, err
	} else if len(des) > 0 {
		return 0, 0, fmt.Errorf("%s is not empty", dir)
	}
	defer func() {
		if err != nil {
			if rerr := removeExtracted(dir, made); rerr != nil {
				err = fmt.Errorf("%w (and removing what was written: %v)", err, rerr)
			}
		}
	}()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, 0, err
	}
	defer root.Close()
	pr, pw := io.Pipe()
	type got struct {
		rev int64
		err error
	}
	done := make(chan got, 1)
	go func() {
		rev, err := c.WriteSnapshot(ctx, ref, pw)
		pw.CloseWithError(err)
		done <- got{rev, err}
	}()
	st, xerr := archive.Extract(root, pr, archive.Limits{MaxBytes: 1 << 40, MaxFiles: archive.DefaultMaxFiles})
	_, _ = io.Copy(io.Discard, pr) // let the writer finish
	g := <-done
	if g.err != nil {
		return 0, st.Files, g.err
	}
	return g.rev, st.Files, xerr
}

// removeExtracted removes what an extraction wrote into dir, which was
// empty before it (and dir itself when made): directories first made
// writable, as a snapshot's may not be. Links are removed, never followed.
func removeExtracted(dir string, made bool) error {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	if made {
		return os.RemoveAll(dir)
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, d := range des {
		if err := os.RemoveAll(filepath.Join(dir, d.Name())); err != nil {
			return err
		}
	}
	return nil
}

// WriteArtifact writes an artifact's bytes to w, checking its digest. It
// reads the object store of the tenant of the job its key names; a
// tenant's client refuses another tenant's.
func (c *Client) WriteArtifact(ctx context.Context, a Artifact, w io.Writer) error {
	t := fleet.ArtifactTenant(a.Key)
	if !c.acc.reaches(t) {
		return invalid("artifact %s: key %q is not tenant %s's", field.Quote(a.Name), shorten.Text(a.Key, 170), c.Tenant())
	}
	store, err := c.objectStore(ctx, fleet.ArtifactsBucketOf(t))
	if err != nil {
		return fmt.Errorf("artifact %s: %w", a.Name, err)
	}
	if err := getObject(ctx, store, a.Key, a.SHA256, w); err != nil {
		return fmt.Errorf("artifact %s: %w", a.Name, err)
	}
	return nil
}

// DownloadArtifacts writes artifacts into dir under their names, making
// directories as needed and replacing files of the same names. Each is
// written to a temporary file beside its name and renamed over it only
// once its digest checks: an artifact that fails leaves the file of its
// name as it was. A name that would leave dir is refused (a worker never
// lists one).
func (c *Client) DownloadArtifacts(ctx context.Context, arts []Artifact, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, a := range arts {
		if err := field.FileName(a.Name); err != nil {
			return fmt.Errorf("artifact %s: %w", field.Quote(a.Name), err)
		}
		if d := path.Dir(a.Name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		if err := c.downloadArtifact(ctx, root, a); err != nil {
			return err
		}
	}
	return nil
}

// downloadArtifact writes one artifact beside its name, then renames it
// into place.
func (c *Client) downloadArtifact(ctx context.Context, root *os.Root, a Artifact) error {
	tmp := path.Join(path.Dir(a.Name), ".sandfleet-"+NewID()+".tmp") // short: the name may be NAME_MAX already
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	err = c.WriteArtifact(ctx, a, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, a.Name)
	}
	if err != nil {
		_ = root.Remove(tmp)
	}
	return err
}

// getObject copies an object to w; with want set, its SHA-256 must be
// want (hex). The object store checks its own digest too.
func getObject(ctx context.Context, store jetstream.ObjectStore, name, want string, w io.Writer) error {
	obj, err := store.Get(ctx, name)
	if err != nil {
		return err
	}
	defer obj.Close()
	sum := sha256.New()
	if _, err := io.Copy(io.MultiWriter(w, sum), obj); err != nil {
		return err
	}
	if got := hex.EncodeToString(sum.Sum(nil)); want != "" && !strings.EqualFold(got, want) {
		return fmt.Errorf("%w: %s has sha256 %s, not %s", ErrDigest, name, got, want)
	}
	return nil
}

// Revision is a kept revision of a workspace: its snapshot's size, when
// it was saved and the job that saved it ("" for a snapshot saved before
// snapshots named their job).
type Revision struct {
	Revision int64     `json:"revision"`
	Job      string    `json:"job,omitempty"`
	Size     uint64    `json:"size"`
	Saved    time.Time `json:"saved"`
}

// Revisions returns the kept revisions of a workspace, newest first: one
// object lookup per revision kept (10 at most by default), never a
// listing of SNAPSHOTS.
func (c *Client) Revisions(ctx context.Context, h *WorkspaceHead) ([]Revision, error) {
	ws, err := c.workspaceStores(ctx)
	if err != nil {
		return nil, err
	}
	var out []Revision
	for _, rev := range slices.Backward(h.Kept) {
		info, err := ws.Snapshots.GetInfo(ctx, h.Snapshot(rev))
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			continue // expired or deleted meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("revision %d of %s: %w", rev, h.Name, err)
		}
		r := Revision{Revision: rev, Job: info.Metadata[fleet.SnapshotJobMeta], Size: info.Size, Saved: info.ModTime.UTC()}
		if t, err := time.Parse(time.RFC3339Nano, info.Metadata[fleet.SnapshotSavedMeta]); err == nil {
			r.Saved = t.UTC() // put again since: its first save
		}
		if r.Job == "" && rev == h.Revision {
			r.Job = h.Job
		}
		out = append(out, r)
	}
	return out, nil
}
