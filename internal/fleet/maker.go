package fleet

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// maker makes streams and buckets: creating those that do not exist, and
// updating those that do to the configuration given, or with leaveExisting leaving
// them as they are. A client that opens a fleet's topology while its
// workers still set it up (the gateway beside an embedded worker) makes
// what is missing with the defaults, and the workers' settings, written
// before or after, are what stays. One window is left: a tenant-writable
// bucket the client makes itself has its rollups turned off by an update
// of the configuration it read, which a worker's update in the round trip
// between would lose (the worker's next Ensure writes it again).
type maker struct {
	js            jetstream.JetStream
	leaveExisting bool // a client's: what exists is the workers' to set
}

func (m maker) stream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if !m.leaveExisting {
		return m.js.CreateOrUpdateStream(ctx, cfg)
	}
	s, err := m.js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return m.js.Stream(ctx, cfg.Name)
	}
	return s, err
}

// Caps of the values sandfleet writes to the buckets tenants can write
// too, so that a value of another size is refused by the server.
const (
	// MaxCancelBytes is the most a value of CANCELS may take: a
	// CancelRequest takes under a hundred bytes.
	MaxCancelBytes = 1 << 10
	// MaxHeadBytes is the most a value of WORKSPACES may take: a head
	// naming the snapshots of the most revisions a worker keeps
	// (internal/worker's MaxKeepRevisions) takes under a third of it.
	MaxHeadBytes = 64 << 10
	// A worker's heartbeat (WORKERS) takes a few hundred bytes.
	maxHeartbeatBytes = 64 << 10
	workersMaxBytes   = 16 << 20
	// objectMaxMsgBytes bounds one message of an object store: nats.go
	// puts objects in chunks of 128 KiB.
	objectMaxMsgBytes = 1 << 20
)

// caps are the limits of a bucket's stream, set by UpdateStream: nats.go
// offers some of them in its configurations but not all (no key count,
// no discard policy), and sets its own again at each of its updates.
type caps struct {
	maxBytes   int64 // bytes of the whole stream
	maxMsgs    int64 // messages (a KV bucket's keys, its deletes included); 0: no cap
	maxMsgSize int32 // one value; 0: no cap
	// discardOld makes room for a new message by removing the oldest;
	// otherwise the new one is refused. nats.go makes a bucket refuse.
	discardOld bool
	// noRollups refuses a Nats-Rollup header: tenants publish into CANCELS
	// and WORKSPACES, each on its own keys' subjects only, and a rollup
	// of the whole subject space on such a publish would purge every
	// tenant's keys (permissions see subjects, not headers). Keys are
	// removed by delete, which needs none.
	noRollups bool
}

// apply sets the caps on sc.
func (l caps) apply(sc *jetstream.StreamConfig) {
	sc.MaxBytes = l.maxBytes
	sc.MaxMsgs, sc.MaxMsgSize = -1, -1
	if l.maxMsgs > 0 {
		sc.MaxMsgs = l.maxMsgs
	}
	if l.maxMsgSize > 0 {
		sc.MaxMsgSize = l.maxMsgSize
	}
	sc.Discard = jetstream.DiscardNew
	if l.discardOld {
		sc.Discard = jetstream.DiscardOld
	}
	if l.noRollups {
		sc.AllowRollup = false
	}
}

// keyValue makes a bucket: nats.go creates one that does not exist, and
// UpdateStream then sets what sandfleet wants of it, never nats.go's own
// update (which would turn rollups back on and drop the caps until ours):
// cfg's description, TTL and replicas as nats.go would set them, and
// lim. With leaveExisting, a bucket that exists is left as it is but for its
// rollups, turned off if lim says so.
func (m maker) keyValue(ctx context.Context, cfg jetstream.KeyValueConfig, lim caps) (jetstream.KeyValue, error) {
	cfg.MaxBytes, cfg.MaxValueSize = lim.maxBytes, lim.maxMsgSize
	err := m.tune(ctx, "KV_"+cfg.Bucket, lim, func() (bool, error) {
		_, err := m.js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			return false, nil
		}
		return err == nil, err
	}, func(sc *jetstream.StreamConfig) {
		sc.Description, sc.MaxAge = cfg.Description, cfg.TTL
		if cfg.Replicas > 0 {
			sc.Replicas = cfg.Replicas
		}
		sc.Duplicates = 2 * time.Minute
		if cfg.TTL > 0 && cfg.TTL < sc.Duplicates {
			sc.Duplicates = cfg.TTL
		}
	})
	if err != nil {
		return nil, err
	}
	return m.js.KeyValue(ctx, cfg.Bucket)
}

// objectStore makes an object store as keyValue makes a bucket.
func (m maker) objectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig, lim caps) (jetstream.ObjectStore, error) {
	cfg.MaxBytes = lim.maxBytes
	err := m.tune(ctx, "OBJ_"+cfg.Bucket, lim, func() (bool, error) {
		_, err := m.js.CreateObjectStore(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			return false, nil
		}
		return err == nil, err
	}, func(sc *jetstream.StreamConfig) {
		sc.Description, sc.MaxAge = cfg.Description, cfg.TTL
		if cfg.Replicas > 0 {
			sc.Replicas = cfg.Replicas
		}
	})
	if err != nil {
		return nil, err
	}
	return m.js.ObjectStore(ctx, cfg.Bucket)
}

// tune makes the stream of a bucket (create, when it does not exist) and
// updates its configuration with set and lim when they change it. An
// existing stream with leaveExisting gets only its rollups turned off.
func (m maker) tune(ctx context.Context, name string, lim caps, create func() (made bool, err error), set func(*jetstream.StreamConfig)) error {
	js := m.js
	leave := m.leaveExisting
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		var made bool
		if made, err = create(); err != nil {
			return err
		}
		// A client that leaves what exists (Open) and made it sets
		// nothing but its rollups (below, from a fresh read): anything
		// more could land over a worker's caps written in between, and
		// the workers' Ensure at their start sets the rest. Made by
		// another meanwhile, it is set as the maker says: a worker as t
		// says, a client not at all beyond rollups.
		if made && leave && !lim.noRollups {
			return nil
		}
		s, err = js.Stream(ctx, name)
	}
	if err != nil {
		return err
	}
	old := s.CachedInfo().Config
	sc := old
	switch {
	case leave && lim.noRollups:
		sc.AllowRollup = false
	case leave:
	default:
		set(&sc)
		lim.apply(&sc)
	}
	if reflect.DeepEqual(sc, old) {
		return nil
	}
	_, err = js.UpdateStream(ctx, sc)
	return err
}
