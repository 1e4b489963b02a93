package sessionhost

import (
	"fmt"
	"time"

	"github.com/sandfleet/sandfleet/pkg/limits"
)

// The bytes persistent sessions' checkpoints archive are bounded over
// time, each session's and all of a tenant's sessions' on this worker, by
// token buckets: a bucket holds up to its burst of bytes and fills at its
// rate a second; an archive takes its size from both. A checkpoint at an
// idle point waits until both hold what its last archive took (capped at
// the burst: one larger than the burst runs when the bucket is full and
// leaves it owing), so a session's checkpoints come at most every
// size / rate once its burst is spent. Pause and delete always checkpoint
// (their files must be saved) and take from the buckets all the same; a
// fork's checkpoint over the bound is refused (ErrLimit) rather than
// forking older files.

// rule is a bucket's rate (bytes a second) and burst (bytes).
type rule struct{ rate, burst int64 }

func (r rule) String() string {
	return fmt.Sprintf("%s a second, %s at once", limits.Size(r.rate), limits.Size(r.burst))
}

// bucket is a token bucket of bytes; its zero value is full.
type bucket struct {
	level float64 // bytes it holds; below 0 when an archive took more
	at    time.Time
}

func (b *bucket) fill(now time.Time, r rule) {
	if b.at.IsZero() {
		b.level = float64(r.burst)
	} else if now.After(b.at) {
		b.level = min(float64(r.burst), b.level+now.Sub(b.at).Seconds()*float64(r.rate))
	}
	b.at = now
}

// wait returns how long until the bucket holds need bytes (at most its
// burst): 0 for now.
func (b *bucket) wait(now time.Time, need int64, r rule) time.Duration {
	b.fill(now, r)
	want := float64(min(need, r.burst))
	if b.level >= want {
		return 0
	}
	return time.Duration((want - b.level) / float64(r.rate) * float64(time.Second))
}

func (b *bucket) take(now time.Time, n int64, r rule) {
	b.fill(now, r)
	b.level -= float64(n)
}

// checkpointWait returns how long a checkpoint of l waits for the bounds
// of its session and of its tenant: 0 for now.
func (h *Host) checkpointWait(l *live, now time.Time) time.Duration {
	l.mu.Lock()
	d := l.ck.rate.wait(now, l.ck.bytes, h.cfg.sessionRule())
	need, tenant := l.ck.bytes, l.info.Tenant
	l.mu.Unlock()
	h.rateMu.Lock()
	defer h.rateMu.Unlock()
	return max(d, h.tenantBucket(tenant).wait(now, need, h.cfg.tenantRule()))
}

// spendCheckpoint takes what an archive of l took from its buckets.
func (h *Host) spendCheckpoint(l *live, n int64) {
	if n <= 0 {
		return
	}
	now := time.Now()
	l.mu.Lock()
	l.ck.rate.take(now, n, h.cfg.sessionRule())
	tenant := l.info.Tenant
	l.mu.Unlock()
	h.rateMu.Lock()
	defer h.rateMu.Unlock()
	h.tenantBucket(tenant).take(now, n, h.cfg.tenantRule())
}

// tenantBucket returns the bucket of a tenant's sessions; h.rateMu held.
func (h *Host) tenantBucket(tenant string) *bucket {
	b := h.rates[tenant]
	if b == nil {
		if h.rates == nil {
			h.rates = map[string]*bucket{}
		}
		b = &bucket{}
		h.rates[tenant] = b
	}
	return b
}

func (c *Config) sessionRule() rule { return rule{c.CheckpointRate, c.CheckpointBurst} }
func (c *Config) tenantRule() rule  { return rule{c.TenantCheckpointRate, c.TenantCheckpointBurst} }

// checkpointRule says both bounds, for an error.
func (c *Config) checkpointRule() string {
	return fmt.Sprintf("a session %s; a tenant's sessions on a worker %s", c.sessionRule(), c.tenantRule())
}
