package worker

import (
	"container/list"
	"sync"
)

// snapCacheBytes bounds the snapshots a worker keeps in memory after saving
// them: an agent's next step on the same workspace, when it lands on the
// same worker, restores from here instead of reading the object store back.
// Only snapshots that fit a spool's memory are kept.
const snapCacheBytes = 64 << 20

// snapCache holds the snapshots this worker saved last, least recently used
// first out. It is a cache and nothing more: an entry is used only when the
// workspace's head names the same revision with the same sha256 (a
// workspace removed and made again reuses revision numbers, not digests),
// and the launcher checks the digest again as it restores. Losing it loses
// nothing: the object store has every snapshot.
type snapCache struct {
	mu    sync.Mutex
	max   int64
	size  int64
	order *list.List // of *snapEntry, most recent first
	byKey map[snapKey]*list.Element
}

// snapKey names a snapshot: its tenant's store, workspace, revision and
// digest.
type snapKey struct {
	tenant, workspace string
	revision          int64
	sha256            string
}

type snapEntry struct {
	key  snapKey
	data []byte
}

func newSnapCache(max int64) *snapCache {
	return &snapCache{max: max, order: list.New(), byKey: map[snapKey]*list.Element{}}
}

// put keeps a copy of data under k, evicting the least recently used
// entries to stay within the cache's bound.
func (c *snapCache) put(k snapKey, data []byte) {
	if c == nil || int64(len(data)) > c.max || k.sha256 == "" {
		return
	}
	e := &snapEntry{key: k, data: append([]byte(nil), data...)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.byKey[k]; ok {
		c.remove(old)
	}
	c.byKey[k] = c.order.PushFront(e)
	c.size += int64(len(e.data))
	for c.size > c.max {
		c.remove(c.order.Back())
	}
}

// get returns the snapshot under k, or nil. The bytes are shared: callers
// only read them.
func (c *snapCache) get(k snapKey) []byte {
	if c == nil || k.sha256 == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[k]
	if !ok {
		return nil
	}
	c.order.MoveToFront(el)
	return el.Value.(*snapEntry).data
}

func (c *snapCache) remove(el *list.Element) {
	e := c.order.Remove(el).(*snapEntry)
	delete(c.byKey, e.key)
	c.size -= int64(len(e.data))
}
