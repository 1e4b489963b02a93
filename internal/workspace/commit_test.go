package workspace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// memKV is a bucket of one key's history in memory; before, when set,
// runs before each write (another writer's move, a lost answer).
type memKV struct {
	mu     sync.Mutex
	vals   map[string][]byte
	revs   map[string]uint64
	seq    uint64
	before func(kv *memKV, key string) error
	after  func(key string) error // runs after a write landed
}

func newMemKV() *memKV { return &memKV{vals: map[string][]byte{}, revs: map[string]uint64{}} }

var _ KV = (*memKV)(nil)

func (m *memKV) Get(_ context.Context, key string) (jetstream.KeyValueEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.vals[key]
	if !ok {
		return nil, jetstream.ErrKeyNotFound
	}
	return entry{key: key, val: v, rev: m.revs[key]}, nil
}

func (m *memKV) Create(ctx context.Context, key string, value []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	return m.write(key, value, 0)
}

func (m *memKV) Update(_ context.Context, key string, value []byte, rev uint64) (uint64, error) {
	return m.write(key, value, rev)
}

func (m *memKV) write(key string, value []byte, rev uint64) (uint64, error) {
	if m.before != nil {
		if err := m.before(m, key); err != nil {
			return 0, err
		}
	}
	rev, err := m.put(key, value, rev)
	if err == nil && m.after != nil {
		err = m.after(key)
	}
	return rev, err
}

// put writes value over revision rev of key (0: create).
func (m *memKV) put(key string, value []byte, rev uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.revs[key] != rev {
		return 0, jetstream.ErrKeyExists
	}
	m.seq++
	m.vals[key], m.revs[key] = value, m.seq
	return m.seq, nil
}

func (m *memKV) head(t *testing.T, key string) *jobs.WorkspaceHead {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	h, err := jobs.DecodeWorkspaceHead(key, m.vals[key])
	if err != nil {
		t.Fatal(err)
	}
	return h
}

type entry struct {
	jetstream.KeyValueEntry
	key string
	val []byte
	rev uint64
}

func (e entry) Key() string      { return e.key }
func (e entry) Value() []byte    { return e.val }
func (e entry) Revision() uint64 { return e.rev }

// memObjects is SNAPSHOTS in memory, counting puts.
type memObjects struct {
	mu   sync.Mutex
	objs map[string][]byte
	puts int
}

func (o *memObjects) Put(_ context.Context, meta jetstream.ObjectMeta, r io.Reader) (*jetstream.ObjectInfo, error) {
	b, err := io.ReadAll(r)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.objs[meta.Name] = b
	o.puts++
	return &jetstream.ObjectInfo{ObjectMeta: meta}, err
}

func (o *memObjects) Delete(_ context.Context, name string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.objs, name)
	return nil
}

func (o *memObjects) names() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for n := range o.objs {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// setHead writes h as the head of its workspace, as another writer would.
func setHead(t *testing.T, kv *memKV, h *jobs.WorkspaceHead) {
	t.Helper()
	b, _ := json.Marshal(h)
	kv.mu.Lock()
	defer kv.mu.Unlock()
	kv.seq++
	kv.vals[h.Name], kv.revs[h.Name] = b, kv.seq
}

// stepCommit is the commit of job J's step, holding ws under lease L.
func stepCommit(kv *memKV, objs *memObjects) Commit {
	return Commit{Heads: Heads{KV: kv}, Snaps: objs, Name: "ws", Lease: "L", By: "J",
		Event: func(_ *jobs.WorkspaceHead, s Saved) any {
			return Save{Job: "J", Lease: "L", Snap: s, Keep: 2, Now: time.Now()}
		}}
}

func running() *jobs.WorkspaceHead {
	return &jobs.WorkspaceHead{Name: "ws", Revision: 1, Kept: []int64{1}, Step: &jobs.InFlight{Job: "J", State: jobs.StepRunning, Lease: "L"}}
}

// A commit puts its snapshot once and moves the head to it, reading the
// head again when another writer wrote first (the save of a job's step
// used to do this; a session's checkpoint put its snapshot again on each
// race, under a new name, and deleted the last).
func TestCommitPutsOnceAcrossRaces(t *testing.T) {
	t.Parallel()
	kv, objs := newMemKV(), &memObjects{objs: map[string][]byte{}}
	setHead(t, kv, running())
	races := 3
	kv.before = func(m *memKV, key string) error {
		if races > 0 {
			races--
			m.mu.Lock()
			m.seq++
			m.revs[key] = m.seq // another writer: the same head, a new revision
			m.mu.Unlock()
		}
		return nil
	}
	m, err := stepCommit(kv, objs).Run(t.Context(), strings.NewReader("tar"), Saved{SizeBytes: 3, SHA256: "ab"})
	if err != nil || m.Action != Write || m.Head.Revision != 2 {
		t.Fatalf("commit: %+v, %v", m, err)
	}
	if want := fleet.SaveName("ws", 2, "L"); objs.puts != 1 || !slices.Equal(objs.names(), []string{want}) || kv.head(t, "ws").Snapshot(2) != want {
		t.Fatalf("%d puts, objects %v, head names %s", objs.puts, objs.names(), kv.head(t, "ws").Snapshot(2))
	}
}

// A write whose answer is lost (it landed) leaves the snapshot, and the
// commit tried again finds the head at its own revision: committed, not
// refused (the session's copy deleted the snapshot on any write error,
// leaving a head that named a deleted snapshot).
func TestCommitAnswerLost(t *testing.T) {
	t.Parallel()
	kv, objs := newMemKV(), &memObjects{objs: map[string][]byte{}}
	setHead(t, kv, running())
	kv.after = func(string) error { return context.DeadlineExceeded }
	c := stepCommit(kv, objs)
	if _, err := c.Run(t.Context(), strings.NewReader("tar"), Saved{SizeBytes: 3}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first try: %v, want the lost answer", err)
	}
	want := fleet.SaveName("ws", 2, "L")
	if !slices.Equal(objs.names(), []string{want}) {
		t.Fatalf("after the lost answer the objects are %v, want %s kept", objs.names(), want)
	}
	kv.after = nil
	m, err := c.Run(t.Context(), strings.NewReader("tar"), Saved{SizeBytes: 3})
	if err != nil || m.Action != Write || m.Head.Revision != 2 || objs.puts != 1 {
		t.Fatalf("the try again: %+v, %v, %d puts; want revision 2 as committed, no second put", m, err, objs.puts)
	}
}

// A head that refuses the commit as read costs no put; one that refuses
// it after the put (removed meanwhile) has the snapshot deleted.
func TestCommitRefused(t *testing.T) {
	t.Parallel()
	kv, objs := newMemKV(), &memObjects{objs: map[string][]byte{}}
	other := running()
	other.Step.Lease = "L2"
	setHead(t, kv, other)
	if _, err := stepCommit(kv, objs).Run(t.Context(), strings.NewReader("tar"), Saved{SizeBytes: 3}); !errors.Is(err, ErrNotHeld) || objs.puts != 0 {
		t.Fatalf("held anew by another delivery: %v, %d puts; want ErrNotHeld, none", err, objs.puts)
	}
	setHead(t, kv, running())
	kv.before = func(m *memKV, key string) error {
		setHead(t, m, &jobs.WorkspaceHead{Name: key}) // removed and made again
		return nil
	}
	if _, err := stepCommit(kv, objs).Run(t.Context(), strings.NewReader("tar"), Saved{SizeBytes: 3}); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("removed meanwhile: %v, want ErrNotHeld", err)
	}
	if objs.puts != 1 || len(objs.names()) != 0 {
		t.Fatalf("removed meanwhile: %d puts, objects %v; want the one put deleted", objs.puts, objs.names())
	}
}

// A session's checkpoint: a new head of its own workspace names its
// owner; an unchanged tree puts nothing; a job's step in flight and
// another owner's head refuse it before any put.
func TestCommitCheckpoint(t *testing.T) {
	t.Parallel()
	kv, objs := newMemKV(), &memObjects{objs: map[string][]byte{}}
	ws := fleet.SessionWorkspace("", "s1")
	commit := func(owner, sha string) (Moved, error) {
		c := Commit{Heads: Heads{KV: kv}, Snaps: objs, Name: ws, Lease: jobs.NewID(), By: "s1",
			Event: func(_ *jobs.WorkspaceHead, s Saved) any {
				return Checkpoint{By: "s1", Owner: owner, Snap: s, Keep: 3, Renew: time.Hour, Now: time.Now()}
			}}
		return c.Run(t.Context(), bytes.NewReader([]byte(sha)), Saved{SizeBytes: int64(len(sha)), SHA256: sha})
	}
	if m, err := commit("alice", "aa"); err != nil || m.Head.Revision != 1 || kv.head(t, ws).Owner != "alice" {
		t.Fatalf("first checkpoint: %+v, %v", m.Head, err)
	}
	if m, err := commit("alice", "aa"); err != nil || m.Action != None || objs.puts != 1 {
		t.Fatalf("unchanged: %+v, %v, %d puts; want none", m, err, objs.puts)
	}
	if _, err := commit("bob", "bb"); !errors.Is(err, ErrOwner) || objs.puts != 1 {
		t.Fatalf("another owner: %v, %d puts; want ErrOwner, none", err, objs.puts)
	}
	h := kv.head(t, ws)
	h.Step = &jobs.InFlight{Job: "J", State: jobs.StepRunning}
	setHead(t, kv, h)
	if _, err := commit("alice", "cc"); !errors.Is(err, ErrBusy) || objs.puts != 1 {
		t.Fatalf("a step in flight: %v, %d puts; want ErrBusy, none", err, objs.puts)
	}
}
