package workspace

import (
	"container/list"
	"sync"
)

// CacheBytes bounds the snapshots a worker keeps in memory after saving
// them: an agent's next step on the same workspace, when it lands on the
// same worker, restores from here instead of reading the object store
// back. Only snapshots that fit a spool's memory are kept.
const CacheBytes = 64 << 20

// Cache holds the snapshots this worker saved last, least recently used
// first out. It is a cache and nothing more: an entry is used only when the
// workspace's head names the same revision with the same sha256 (a
// workspace removed and made again reuses revision numbers, not digests),
// and the launcher checks the digest again as it restores. Losing it loses
// nothing: the object store has every snapshot.
type Cache struct {
	mu    sync.Mutex
	max   int64
	size  int64
	order *list.List // of *cacheEntry, most recent first
	byKey map[CacheKey]*list.Element
}

// CacheKey names a snapshot: its tenant's store, workspace, revision and
// digest.
type CacheKey struct {
	Tenant, Workspace string
	Revision          int64
	SHA256            string
}

type cacheEntry struct {
	key  CacheKey
	data []byte
}

func NewCache(max int64) *Cache {
	return &Cache{max: max, order: list.New(), byKey: map[CacheKey]*list.Element{}}
}

// Put keeps a copy of data under k, evicting the least recently used
// entries to stay within the cache's bound.
func (c *Cache) Put(k CacheKey, data []byte) {
	if c == nil || int64(len(data)) > c.max || k.SHA256 == "" {
		return
	}
	e := &cacheEntry{key: k, data: append([]byte(nil), data...)}
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

// Get returns the snapshot under k, or nil. The bytes are shared: callers
// only read them.
func (c *Cache) Get(k CacheKey) []byte {
	if c == nil || k.SHA256 == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[k]
	if !ok {
		return nil
	}
	c.order.MoveToFront(el)
	return el.Value.(*cacheEntry).data
}

func (c *Cache) remove(el *list.Element) {
	e := c.order.Remove(el).(*cacheEntry)
	delete(c.byKey, e.key)
	c.size -= int64(len(e.data))
}
