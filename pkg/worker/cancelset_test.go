package worker

import (
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// The set answers only once the watcher has read CANCELS through, follows
// puts and deletes, and gives up (every job asks the server again) past
// its bound.
func TestCancelSet(t *testing.T) {
	c := cancelSet{ids: map[string]struct{}{}}
	c.update(jetstream.KeyValuePut, "a")
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
	c.update(jetstream.KeyValueDelete, "a")
	if found, _ := c.has("a"); found {
		t.Fatal("a deleted request still found")
	}
	for i := range maxCancelSet + 1 {
		c.update(jetstream.KeyValuePut, strconv.Itoa(i))
	}
	if _, known := c.has("1"); known {
		t.Fatal("still answering past the bound")
	}
	c.setSynced(true)
	if _, known := c.has("1"); known {
		t.Fatal("answering again after giving up")
	}
}
