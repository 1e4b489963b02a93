package worker

import (
	"bytes"
	"testing"
)

func TestSnapCache(t *testing.T) {
	c := newSnapCache(10)
	a := snapKey{"", "ws", 1, "aa"}
	data := []byte("12345")
	c.put(a, data)
	data[0] = 'x' // the cache holds its own copy
	if got := c.get(a); !bytes.Equal(got, []byte("12345")) {
		t.Fatalf("get = %q", got)
	}
	// The same revision with another digest (the workspace removed and
	// made again) is another snapshot.
	if got := c.get(snapKey{"", "ws", 1, "bb"}); got != nil {
		t.Fatalf("another digest: %q", got)
	}
	if got := c.get(snapKey{"t", "ws", 1, "aa"}); got != nil {
		t.Fatalf("another tenant: %q", got)
	}
	b := snapKey{"", "ws", 2, "cc"}
	c.put(b, []byte("abcd"))
	c.get(a) // a is now the most recent: b goes first
	c.put(snapKey{"", "ws", 3, "dd"}, []byte("xyz"))
	if c.get(b) != nil || c.get(a) == nil {
		t.Fatalf("evicted the wrong entry: size %d", c.size)
	}
	if c.size > c.max {
		t.Fatalf("size %d over %d", c.size, c.max)
	}
	c.put(snapKey{"", "big", 1, "ee"}, make([]byte, 11))
	if c.get(snapKey{"", "big", 1, "ee"}) != nil || c.get(a) == nil {
		t.Fatal("an entry over the bound was kept, or evicted the rest")
	}
	c.put(snapKey{"", "ws", 9, ""}, []byte("1"))
	if c.get(snapKey{"", "ws", 9, ""}) != nil {
		t.Fatal("kept an entry without a digest")
	}
}
