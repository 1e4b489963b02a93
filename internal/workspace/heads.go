package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// KV is what the heads need of the bucket WORKSPACES (a
// jetstream.KeyValue).
type KV interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error)
	Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error)
}

// Objects is what a commit needs of a tenant's SNAPSHOTS (a
// jetstream.ObjectStore).
type Objects interface {
	Put(ctx context.Context, meta jetstream.ObjectMeta, r io.Reader) (*jetstream.ObjectInfo, error)
	Delete(ctx context.Context, name string) error
}

var (
	_ KV      = jetstream.KeyValue(nil)
	_ Objects = jetstream.ObjectStore(nil)
)

// ErrRaced: the head changed since it was read.
var ErrRaced = errors.New("workspace head changed")

// maxRaces bounds the reads again of one move: each race is another
// writer's progress, and a head rewritten without end (by hand) must not
// hold a step's save or a checkpoint forever.
const maxRaces = 10

// Heads reads and writes the heads of one bucket.
type Heads struct{ KV KV }

// Read returns the head of name and its KV revision; nil and 0 when
// absent.
func (hs Heads) Read(ctx context.Context, name string) (*jobs.WorkspaceHead, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	e, err := hs.KV.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read the head of %s: %w", name, err)
	}
	h, err := jobs.DecodeWorkspaceHead(name, e.Value())
	if err != nil {
		return nil, 0, err
	}
	return h, e.Revision(), nil
}

// Write writes next over the head read at KV revision rev (0: there was
// none), or returns ErrRaced when it changed meanwhile.
func (hs Heads) Write(ctx context.Context, name string, rev uint64, next *jobs.WorkspaceHead) (uint64, error) {
	data, err := json.Marshal(next)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var newRev uint64
	if rev == 0 {
		newRev, err = hs.KV.Create(ctx, name, data)
	} else {
		newRev, err = hs.KV.Update(ctx, name, data, rev)
	}
	if fleet.Raced(err) {
		return 0, ErrRaced
	}
	return newRev, err
}

// Moved is a head's move: the head before and after, and the KV revision
// written.
type Moved struct {
	Before, Head *jobs.WorkspaceHead
	Rev          uint64
	Action       Action
}

// Move moves the head of name by the event ev returns for the head as
// read, reading it again when another writer wrote first. Nothing is
// written unless the transition says Write.
func (hs Heads) Move(ctx context.Context, name string, ev func(*jobs.WorkspaceHead) any) (Moved, error) {
	h, rev, err := hs.Read(ctx, name)
	if err != nil {
		return Moved{}, err
	}
	return hs.move(ctx, name, h, rev, ev)
}

func (hs Heads) move(ctx context.Context, name string, h *jobs.WorkspaceHead, rev uint64, ev func(*jobs.WorkspaceHead) any) (Moved, error) {
	for range maxRaces {
		next, act, err := Transition(name, h, ev(h))
		m := Moved{Before: h, Head: next, Rev: rev, Action: act}
		if err != nil || act != Write {
			return m, err
		}
		m.Rev, err = hs.Write(ctx, name, rev, next)
		if !errors.Is(err, ErrRaced) {
			return m, err
		}
		if h, rev, err = hs.Read(ctx, name); err != nil {
			return Moved{}, err
		}
	}
	return Moved{}, fmt.Errorf("the head of %s kept changing", name)
}
