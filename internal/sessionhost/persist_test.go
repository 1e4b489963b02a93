package sessionhost_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/sessionhost"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// filesBox is a sandbox whose /workspace is one blob: exec "write X"
// makes it X, any other command leaves it; its archive is the blob.
type filesBox struct {
	fakeSandbox
	mu    sync.Mutex
	files []byte
}

func (f *filesBox) Do(ctx context.Context, req *envelope.Request) (*envelope.Reply, error) {
	if argv := execArgv(req); req.Op == sessionapi.OpExec && len(argv) == 2 && argv[0] == "write" {
		f.mu.Lock()
		f.files = []byte(argv[1])
		f.mu.Unlock()
	}
	return f.fakeSandbox.Do(ctx, req)
}

func (f *filesBox) Archive(_ context.Context, w io.Writer) (*envelope.ArchiveReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := w.Write(f.files); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(f.files)
	return &envelope.ArchiveReport{Bytes: int64(len(f.files)), SHA256: hex.EncodeToString(sum[:]), Files: 1}, nil
}

// persistBundle is a host of persistent sessions on filesBox sandboxes,
// keeping their checkpoints in a real JetStream, its log kept.
type persistBundle struct {
	client *sessions.Client
	heads  jetstream.KeyValue
	logs   *testutil.Buffer
}

func setupPersist(t *testing.T, cfg sessionhost.Config) *persistBundle {
	t.Helper()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	ws, err := fleet.Topology{}.EnsureWorkspaces(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	b := &persistBundle{heads: ws.Heads, logs: &testutil.Buffer{}}
	cfg.Worker = "w"
	cfg.CheckpointQuiet = 10 * time.Millisecond
	cfg.Logger = slog.New(slog.NewJSONHandler(b.logs, nil))
	cfg.Workspaces = func(context.Context, string) (jetstream.KeyValue, jetstream.ObjectStore, error) {
		return ws.Heads, ws.Snapshots, nil
	}
	cfg.Limits = func(_, _ string, l limits.Limits) (limits.Limits, error) {
		return limits.Resolve(l, limits.Default(), limits.DefaultCaps())
	}
	runs := &atomic.Int64{}
	start := func(context.Context, sessionhost.StartSpec) (sessionhost.Sandbox, error) {
		return &filesBox{fakeSandbox: fakeSandbox{runs: runs, done: make(chan struct{})}}, nil
	}
	h, err := sessionhost.New(t.Context(), js, start, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	if b.client, err = sessions.NewClient(t.Context(), js, "alice"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the host serving", func() bool { return strings.Contains(b.logs.String(), "serving sessions") })
	return b
}

// revision returns the revision of a session's workspace's head.
func (b *persistBundle) revision(t *testing.T, s *sessions.Info) int64 {
	t.Helper()
	e, err := b.heads.Get(t.Context(), s.Workspace)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	h, err := jobs.DecodeWorkspaceHead(s.Workspace, e.Value())
	if err != nil {
		t.Fatal(err)
	}
	return h.Revision
}

// logged counts the log lines of msg about session id.
func (b *persistBundle) logged(msg, id string) int {
	n := 0
	for line := range strings.Lines(b.logs.String()) {
		if strings.Contains(line, `"msg":"`+msg+`"`) && strings.Contains(line, `"session_id":"`+id+`"`) {
			n++
		}
	}
	return n
}

func (b *persistBundle) exec(t *testing.T, id string, argv ...string) {
	t.Helper()
	if _, err := b.client.Exec(t.Context(), id, "", sessionapi.ExecRequest{Cmd: argv}); err != nil {
		t.Fatal(err)
	}
}

// A call that changes nothing (`true`) after a checkpoint makes the
// session due another, which archives the tree, finds its digest the
// head's, and saves no revision; a change is saved.
func TestCheckpointUnchangedIsNotSaved(t *testing.T) {
	t.Parallel()
	b := setupPersist(t, sessionhost.Config{})
	s, err := b.client.Create(t.Context(), sessions.Spec{Persist: true})
	if err != nil {
		t.Fatal(err)
	}
	b.exec(t, s.ID, "write", strings.Repeat("a", 4096))
	testutil.Eventually(t, 10*time.Second, "revision 1", func() bool { return b.revision(t, s) == 1 })
	for i := range 3 {
		b.exec(t, s.ID, "true")
		testutil.Eventually(t, 10*time.Second, "the unchanged checkpoint", func() bool {
			return b.logged("session checkpoint unchanged", s.ID) == i+1
		})
		if rev := b.revision(t, s); rev != 1 {
			t.Fatalf("after %d unchanged checkpoints the head is at revision %d, want 1", i+1, rev)
		}
	}
	b.exec(t, s.ID, "write", strings.Repeat("b", 4096))
	// The head moves first; the record and the log follow it.
	testutil.Eventually(t, 10*time.Second, "revision 2, in the record and the log", func() bool {
		info, err := b.client.Get(t.Context(), s.ID)
		return b.revision(t, s) == 2 && err == nil && info.Checkpoint != nil && info.Checkpoint.Revision == 2 &&
			b.logged("session checkpointed", s.ID) >= 2
	})
	if n := b.logged("session checkpointed", s.ID); n != 2 {
		t.Errorf("%d checkpoints saved, want 2", n)
	}
}

// An unchanged tree whose head is older than RefreshAge is saved all the
// same: the new revision renews the workspace's expiry.
func TestCheckpointUnchangedRenewsAnOldHead(t *testing.T) {
	t.Parallel()
	b := setupPersist(t, sessionhost.Config{RefreshAge: time.Nanosecond})
	s, err := b.client.Create(t.Context(), sessions.Spec{Persist: true})
	if err != nil {
		t.Fatal(err)
	}
	b.exec(t, s.ID, "write", "a")
	testutil.Eventually(t, 10*time.Second, "revision 1", func() bool { return b.revision(t, s) == 1 })
	b.exec(t, s.ID, "true")
	testutil.Eventually(t, 10*time.Second, "revision 2 of the same tree", func() bool { return b.revision(t, s) == 2 })
}

// The bytes a session's checkpoints archive are bounded, and so are its
// tenant's sessions': past a session's burst its idle checkpoint waits
// (the head stays), a fork's is refused as over the bound, a pause still
// saves; another session of the tenant is held by the tenant's bound.
func TestCheckpointBytesBounded(t *testing.T) {
	t.Parallel()
	const size = 1000
	b := setupPersist(t, sessionhost.Config{CheckpointRate: 1, CheckpointBurst: 3 * size, TenantCheckpointRate: 1, TenantCheckpointBurst: 4 * size})
	ctx := t.Context()
	a, err := b.client.Create(ctx, sessions.Spec{Persist: true})
	if err != nil {
		t.Fatal(err)
	}
	write := func(s *sessions.Info, c string) { b.exec(t, s.ID, "write", strings.Repeat(c, size)) }
	for i, c := range []string{"a", "b", "c"} {
		write(a, c)
		testutil.Eventually(t, 10*time.Second, "a checkpoint within the burst", func() bool { return b.revision(t, a) == int64(i+1) })
	}
	write(a, "d")
	testutil.Eventually(t, 10*time.Second, "the checkpoint over the burst waiting", func() bool {
		return b.logged("a session's checkpoint waits for its bound", a.ID) > 0
	})
	if rev := b.revision(t, a); rev != 3 {
		t.Fatalf("past its burst the session's head is at revision %d, want 3", rev)
	}
	if _, err := b.client.Fork(ctx, a.ID, sessions.ForkRequest{}); !errors.Is(err, sessionapi.ErrLimit) || !strings.Contains(err.Error(), "bound") {
		t.Errorf("a fork past the bound: %v, want ErrLimit naming the bound", err)
	}

	// The tenant's bucket holds one more archive: another session saves
	// one, then waits, while its own bucket is all but full.
	other, err := b.client.Create(ctx, sessions.Spec{Persist: true})
	if err != nil {
		t.Fatal(err)
	}
	write(other, "x")
	testutil.Eventually(t, 10*time.Second, "the other session's checkpoint", func() bool { return b.revision(t, other) == 1 })
	write(other, "y")
	testutil.Eventually(t, 10*time.Second, "the other session held by its tenant's bound", func() bool {
		return b.logged("a session's checkpoint waits for its bound", other.ID) > 0
	})
	if rev := b.revision(t, other); rev != 1 {
		t.Fatalf("past its tenant's burst the other session's head is at revision %d, want 1", rev)
	}

	// A pause saves the files whatever the bound.
	p, err := b.client.Pause(ctx, a.ID)
	if err != nil || p.Checkpoint == nil || p.Checkpoint.Revision != 4 || b.revision(t, a) != 4 {
		t.Fatalf("pause over the bound: %+v, %v, want revision 4 saved", p, err)
	}
}

// A worker that starts again leaves the persistent sessions of its
// earlier run that have a checkpoint to their next call (which resumes
// them); those without one, and those that do not persist, are lost.
func TestRestartLeavesCheckpointedSessions(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	kv, err := sessionhost.EnsureBucket(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := fleet.Topology{}.EnsureWorkspaces(t.Context(), js)
	if err != nil {
		t.Fatal(err)
	}
	put := func(info sessions.Info) {
		info.Worker, info.Status, info.Owner = "w", sessions.StatusRunning, "alice"
		info.Workspace = fleet.SessionWorkspace("", info.ID)
		b, _ := json.Marshal(info)
		if _, err := kv.Put(t.Context(), info.ID, b); err != nil {
			t.Fatal(err)
		}
	}
	put(sessions.Info{ID: "plain"})
	put(sessions.Info{ID: "checkpointed", Persist: true, Checkpoint: &sessions.Checkpoint{Revision: 1}})
	put(sessions.Info{ID: "fresh", Persist: true})
	logs := &testutil.Buffer{}
	h, err := sessionhost.New(t.Context(), js, nil, sessionhost.Config{Worker: "w", Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		Workspaces: func(context.Context, string) (jetstream.KeyValue, jetstream.ObjectStore, error) {
			return ws.Heads, ws.Snapshots, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	defer func() { stop(); <-done }()
	c, _ := sessions.NewClient(t.Context(), js, "alice")
	testutil.Eventually(t, 10*time.Second, "the host serving", func() bool { return strings.Contains(logs.String(), "serving sessions") })
	for _, id := range []string{"plain", "fresh"} {
		if info, err := c.Get(t.Context(), id); err != nil || info.EndReason != sessions.EndLost {
			t.Errorf("%s after its worker's restart: %+v, %v, want lost", id, info, err)
		}
	}
	if info, _ := c.Get(t.Context(), "checkpointed"); info.Status != sessions.StatusRunning {
		t.Errorf("a checkpointed persistent session after its worker's restart: %+v, want it left to resume", info)
	}
}

// A session's workspace_from names a workspace that must exist, but may
// have no revision yet: it starts empty, as a job's workspace_from does
// (a session used to be refused as ErrGone). One that does not exist is
// still ErrGone.
func TestWorkspaceFromAnEmptyWorkspace(t *testing.T) {
	t.Parallel()
	b := setupPersist(t, sessionhost.Config{})
	empty, _ := json.Marshal(jobs.WorkspaceHead{Name: "shared"})
	if _, err := b.heads.Put(t.Context(), "shared", empty); err != nil {
		t.Fatal(err)
	}
	s, err := b.client.Create(t.Context(), sessions.Spec{WorkspaceFrom: &jobs.WorkspaceRef{Name: "shared"}})
	if err != nil {
		t.Fatalf("a session from an empty workspace: %v, want an empty start", err)
	}
	if s.Restored != nil && s.Restored.Revision != 0 {
		t.Errorf("restored %+v, want nothing", s.Restored)
	}
	if _, err := b.client.Create(t.Context(), sessions.Spec{WorkspaceFrom: &jobs.WorkspaceRef{Name: "nowhere"}}); !errors.Is(err, sessionapi.ErrGone) {
		t.Errorf("a session from no workspace: %v, want ErrGone", err)
	}
}
