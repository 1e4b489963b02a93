package worker

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The set answers only once the watcher has read CANCELS through, follows
// puts and deletes, and gives up (every job asks the server again) past
// its bound.
func TestCancelSet(t *testing.T) {
	c := cancelSet{ttl: time.Hour, ids: map[string]time.Time{}}
	now := time.Now()
	c.update(jetstream.KeyValuePut, "a", now)
	if _, known := c.has("a"); known {
		t.Fatal("known before the bucket was read through")
	}
	c.setSynced(true)
	if found, known := c.has("a"); !found || !known {
		t.Fatalf("a: found %v known %v", found, known)
	}
	if found, known := c.has("b"); found || !known {
		t.Fatalf("b: found %v known %v", found, known)
	}
	c.update(jetstream.KeyValueDelete, "a", now)
	if found, _ := c.has("a"); found {
		t.Fatal("a deleted request still found")
	}
	// Expired from the bucket (no watcher hears of it): gone here too.
	c.update(jetstream.KeyValuePut, "old", now.Add(-2*time.Hour))
	if found, _ := c.has("old"); found {
		t.Fatal("a request older than the bucket's TTL found")
	}
	for i := range maxCancelSet + 1 {
		c.update(jetstream.KeyValuePut, strconv.Itoa(i), now)
	}
	if _, known := c.has("1"); known {
		t.Fatal("still answering past the bound")
	}
	c.setSynced(true)
	if _, known := c.has("1"); known {
		t.Fatal("answering again after giving up")
	}
}
