package executor

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
)

// The user a sandbox's uid is. A uid without a passwd entry breaks what
// looks itself up: whoami, Python's getpass.getuser() and pwd.getpwuid
// (PyTorch's compile cache calls them), ~user, git's identity. So each
// sandbox's /etc/passwd and /etc/group are the image's, without any entry
// of its uid or of the name SandboxUser, plus SandboxUser with its uid,
// its group and its home: files the executor writes on the engine's host
// and the engine bind-mounts read-only, as it does the egress CA bundle
// (the root filesystem stays read-only, and the files are the executor's:
// nothing in the sandbox can write them).
//
// The image's files are read once per image ID, from a container created
// for that and never started; a sandbox's own files are a few hundred bytes
// written before its create, no call to the engine, and removed when its
// uid is freed.
const (
	// SandboxUser is the name of every sandbox's uid and gid, in its
	// /etc/passwd and /etc/group and in USER and LOGNAME.
	SandboxUser = "sandbox"
	// sandboxEmail is EMAIL, which git takes for the committer's address
	// when none is configured: without it git makes one of the user and
	// host names, refuses it ("sandbox@sandbox.(none)") and no commit is
	// made. .invalid says that it reaches no one.
	sandboxEmail = "sandbox@sandbox.invalid"
	sandboxShell = "/bin/sh"
	// maxUserTable bounds what is kept of an image's /etc/passwd or
	// /etc/group: a larger one is cut at its last whole line within it.
	maxUserTable = 1 << 20
	// maxImageTables bounds the images whose tables are kept: a worker
	// sees a few presets' images and its tenants' templates.
	maxImageTables = 256
)

// userEnvDefaults are set in the container's environment, so the
// launcher and every process it starts have them, unless the image sets
// them (a job's env may still). HOME is the launcher's to set too.
var userEnvDefaults = []struct{ key, value string }{
	{"USER", SandboxUser}, {"LOGNAME", SandboxUser}, {"HOME", workDir}, {"EMAIL", sandboxEmail},
}

// sandboxUser is how a sandbox's container is given its user: the host's
// files mounted at /etc/passwd and /etc/group, and the environment.
type sandboxUser struct {
	passwd, group string // paths on the engine's host
	env           []string
}

// mounts are the read-only bind mounts of the sandbox's user tables.
func (u *sandboxUser) mounts() []mount.Mount {
	bind := func(src, dst string) mount.Mount {
		return mount.Mount{Type: mount.TypeBind, Source: src, Target: dst, ReadOnly: true,
			BindOptions: &mount.BindOptions{NonRecursive: true}}
	}
	return []mount.Mount{bind(u.passwd, "/etc/passwd"), bind(u.group, "/etc/group")}
}

// userTables are an image's /etc/passwd and /etc/group, nil where it has
// none.
type userTables struct{ passwd, group []byte }

// userFiles are an executor's sandboxes' user tables: the images' as read,
// and the directory the sandboxes' own are written to.
type userFiles struct {
	dir    string // this executor's: sandfleet-users-<worker>-<instance> in os.TempDir()
	prefix string // what every executor of the worker names its directory with
	mu     sync.Mutex
	images map[string]*imageTables // by image ID
	lock   *os.File                // dir's lock file, held while the executor lives (see removeOthers)
}

type imageTables struct {
	done chan struct{} // closed once t and err are set
	t    userTables
	err  error
}

// newUserFiles names the directory of an executor's user tables: under
// os.TempDir(), the same directory the egress gateway writes its CA bundle
// to, so that what makes one reach the engine (a worker in a container
// shares it with the host at the same path) makes both. The worker's part
// is a hash of its ID, which may hold any character; Reap removes the
// directories of the worker's earlier executors.
func newUserFiles(workerID, instance string) *userFiles {
	sum := sha256.Sum256([]byte(workerID))
	prefix := "sandfleet-users-" + hex.EncodeToString(sum[:8]) + "-"
	return &userFiles{dir: filepath.Join(os.TempDir(), prefix+instance), prefix: prefix, images: map[string]*imageTables{}}
}

// imageUsers returns the user tables of the image imageID, read once per
// executor; callers that ask while it is read wait for that read. A
// failed read is not kept: the next launch tries again.
func (e *Executor) imageUsers(ctx context.Context, imageID string) (userTables, error) {
	if imageID == "" { // the engine named no image: nothing to read from
		return userTables{}, nil
	}
	u := e.users
	u.mu.Lock()
	it, ok := u.images[imageID]
	if !ok {
		if len(u.images) >= maxImageTables {
			u.forgetOne()
		}
		it = &imageTables{done: make(chan struct{})}
		u.images[imageID] = it
	}
	u.mu.Unlock()
	if !ok {
		it.t, it.err = e.readImageUsers(ctx, imageID)
		if it.err != nil {
			u.mu.Lock()
			delete(u.images, imageID)
			u.mu.Unlock()
		}
		close(it.done)
	}
	select {
	case <-it.done:
		return it.t, it.err
	case <-ctx.Done():
		return userTables{}, infraErr("read the image's users", ctx.Err())
	}
}

// forgetOne drops the tables of one image that are not being read.
func (u *userFiles) forgetOne() {
	for id, it := range u.images {
		select {
		case <-it.done:
			delete(u.images, id)
			return
		default:
		}
	}
}

// readImageUsers reads the image's /etc/passwd and /etc/group from a
// container created for it, never started, and removed at once. It
// carries the executor's labels, so that Reap removes it if the worker
// dies before it does.
func (e *Executor) readImageUsers(ctx context.Context, imageID string) (userTables, error) {
	ctx = context.WithoutCancel(ctx) // as create's: a canceled create may still make a container
	// Named, so that one the engine makes after its create was abandoned
	// at the deadline is found and removed, as a sandbox's is.
	name := "sandfleet-users-" + e.instance + "-" + randHex(4)
	created, err := e.api.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image: imageID,
			// Never run; an image with no command of its own needs one to
			// be created.
			Entrypoint:      []string{"/sandfleet-never-started"},
			NetworkDisabled: true,
			Labels:          map[string]string{LabelManaged: "true", LabelWorker: e.cfg.WorkerID, LabelInstance: e.instance},
		},
		HostConfig: &container.HostConfig{NetworkMode: "none", LogConfig: container.LogConfig{Type: "none"}},
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			e.discard(ctx, name)
			e.removing.Go(func() { e.sweepLate(name) })
		}
		return userTables{}, infraErr("read the image's users: create", err)
	}
	defer func() {
		// RemoveVolumes: the image's VOLUMEs made anonymous volumes.
		if _, err := e.api.ContainerRemove(ctx, created.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			e.stick(created.ID, 0, false, nil, err) // retried in the background, as a sandbox's
		}
	}()
	var t userTables
	if t.passwd, err = e.copyTable(ctx, created.ID, "/etc/passwd"); err != nil {
		return userTables{}, err
	}
	if t.group, err = e.copyTable(ctx, created.ID, "/etc/group"); err != nil {
		return userTables{}, err
	}
	return t, nil
}

// copyTable reads the file at p in container id, following symbolic links
// (within the container's root) a few times: nil when there is none, or
// it is not a regular file.
func (e *Executor) copyTable(ctx context.Context, id, p string) ([]byte, error) {
	for range 8 {
		r, err := e.api.CopyFromContainer(ctx, id, client.CopyFromContainerOptions{SourcePath: p})
		if cerrdefs.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, infraErr("read the image's "+p, err)
		}
		h, data, err := firstFile(r.Content)
		r.Content.Close()
		if err != nil {
			return nil, infraErr("read the image's "+p, err)
		}
		switch h.Typeflag {
		case tar.TypeReg:
			return data, nil
		case tar.TypeSymlink:
			target := h.Linkname
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(p), target)
			}
			p = target
		default:
			return nil, nil
		}
	}
	return nil, nil
}

// firstFile reads the first entry of an archive, and its content up to
// maxUserTable, cut at its last whole line.
func firstFile(r io.Reader) (*tar.Header, []byte, error) {
	tr := tar.NewReader(r)
	h, err := tr.Next()
	if err != nil {
		return nil, nil, err
	}
	if h.Typeflag != tar.TypeReg {
		return h, nil, nil
	}
	data, err := io.ReadAll(io.LimitReader(tr, maxUserTable+1))
	if err != nil {
		return nil, nil, err
	}
	if len(data) > maxUserTable {
		data = data[:bytes.LastIndexByte(data[:maxUserTable], '\n')+1]
	}
	return h, data, nil
}

// write writes the user tables of the sandbox of uid on image t, and
// returns how its container mounts them. env is the image's environment.
func (u *userFiles) write(uid uint32, t userTables, env []string) (*sandboxUser, error) {
	if err := os.MkdirAll(u.dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: the sandboxes' user tables: %w", ErrInfrastructure, err)
	}
	u.hold()
	os.Chmod(u.dir, 0o755) // whatever the umask: runsc's gofer reads through it
	base := filepath.Join(u.dir, strconv.FormatUint(uint64(uid), 10))
	su := &sandboxUser{passwd: base + ".passwd", group: base + ".group", env: userEnv(env)}
	err := errors.Join(writeReadable(su.passwd, mergePasswd(t.passwd, uid)), writeReadable(su.group, mergeGroup(t.group, uid)))
	if err != nil {
		u.remove(uid)
		return nil, fmt.Errorf("%w: the sandboxes' user tables: %w", ErrInfrastructure, err)
	}
	return su, nil
}

// remove removes the user tables of uid: its sandbox is gone (a running
// container keeps the files it mounted in any case).
func (u *userFiles) remove(uid uint32) {
	base := filepath.Join(u.dir, strconv.FormatUint(uint64(uid), 10))
	os.Remove(base + ".passwd")
	os.Remove(base + ".group")
}

// hold takes the lock of the executor's directory once it exists: a
// directory whose lock is held belongs to an executor that lives.
func (u *userFiles) hold() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.lock != nil {
		return
	}
	f, err := os.OpenFile(filepath.Join(u.dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		f.Close()
		return
	}
	u.lock = f
}

// release lets the directory's lock go (the executor closes).
func (u *userFiles) release() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.lock != nil {
		u.lock.Close()
		u.lock = nil
	}
}

// removeOthers removes the user tables of the worker's other executors
// (what a crashed predecessor left): their sandboxes are Reap's. A
// directory whose lock is held is a live executor's (the same worker ID
// twice on one host), whose sandboxes still start with its files.
func (u *userFiles) removeOthers() {
	dirs, _ := filepath.Glob(filepath.Join(filepath.Dir(u.dir), u.prefix+"*"))
	for _, d := range dirs {
		if d == u.dir || held(d) {
			continue
		}
		os.RemoveAll(d)
	}
}

// held reports whether an executor holds directory d's lock.
func held(d string) bool {
	f, err := os.Open(filepath.Join(d, ".lock"))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// writeReadable replaces path with data, readable by every uid whatever
// the umask: a sandbox's uid reads it through its mount.
func writeReadable(path string, data []byte) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// userEnv is what of userEnvDefaults the image's environment env lacks.
func userEnv(env []string) []string {
	var out []string
	for _, d := range userEnvDefaults {
		set := false
		for _, kv := range env {
			if k, _, _ := strings.Cut(kv, "="); k == d.key {
				set = true
				break
			}
		}
		if !set {
			out = append(out, d.key+"="+d.value)
		}
	}
	return out
}

// mergePasswd is the image's /etc/passwd without any entry of uid or named
// SandboxUser (the sandbox image's own is 10001), and SandboxUser as uid.
// Every other line is kept as it is, comments and all.
func mergePasswd(image []byte, uid uint32) []byte {
	id := strconv.FormatUint(uint64(uid), 10)
	out := keepLines(image, func(f []string) ([]string, bool) {
		return f, f[0] != SandboxUser && (len(f) < 3 || f[2] != id)
	})
	return fmt.Appendf(out, "%s:x:%s:%s:%s:%s:%s\n", SandboxUser, id, id, SandboxUser, workDir, sandboxShell)
}

// mergeGroup is the image's /etc/group without any group of gid uid or
// named SandboxUser, nor SandboxUser among other groups' members (the
// sandbox is in no other group), and the group SandboxUser as uid.
func mergeGroup(image []byte, uid uint32) []byte {
	id := strconv.FormatUint(uint64(uid), 10)
	out := keepLines(image, func(f []string) ([]string, bool) {
		if f[0] == SandboxUser || len(f) >= 3 && f[2] == id {
			return f, false
		}
		if len(f) == 4 {
			members := strings.Split(f[3], ",")
			for i := 0; i < len(members); {
				if members[i] == SandboxUser {
					members = append(members[:i], members[i+1:]...)
				} else {
					i++
				}
			}
			f[3] = strings.Join(members, ",")
		}
		return f, true
	})
	return fmt.Appendf(out, "%s:x:%s:\n", SandboxUser, id)
}

// keepLines passes each line's colon-separated fields to keep, which says
// whether the line stays and may change its fields; every line kept ends
// with a newline.
func keepLines(table []byte, keep func([]string) ([]string, bool)) []byte {
	var out []byte
	for line := range strings.Lines(string(table)) {
		body := strings.TrimSuffix(line, "\n")
		f := strings.Split(body, ":")
		g, ok := keep(f)
		if !ok {
			continue
		}
		out = append(append(out, strings.Join(g, ":")...), '\n')
	}
	return out
}
